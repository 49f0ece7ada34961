"""rl-doctor's card: the ``rlcore doctor`` command (rl_doctor.doctor)."""

from __future__ import annotations

from rl_core import hookimpl
from rl_core.cards import CommandCard


@hookimpl
def rl_core_register_commands(register):
    register(CommandCard(name="doctor", factory="rl_doctor.doctor:add_parser",
                         help="rlcore doctor: versions, plugins, devices, and a local all-reduce test (--cluster: a placement's cluster check)"))
