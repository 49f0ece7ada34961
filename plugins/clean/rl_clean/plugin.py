"""rl-clean's card: the ``rlcore clean`` command (rl_clean.clean)."""

from __future__ import annotations

from rl_core import hookimpl
from rl_core.cards import CommandCard


@hookimpl
def rl_core_register_commands(register):
    register(CommandCard(name="clean", factory="rl_clean.clean:add_parser",
                         help="rlcore clean RUN_DIR: remove a run folder's checkpoints, keep its metrics, plots and final model"))
