"""rl-eval's card: the ``rlcore eval`` command (rl_eval.eval)."""

from __future__ import annotations

from rl_core import hookimpl
from rl_core.cards import CommandCard


@hookimpl
def rl_core_register_commands(register):
    register(CommandCard(name="eval", factory="rl_eval.eval:add_parser",
                         help="rlcore eval RUN_DIR_OR_MODEL [CONFIG]: validation only, scores per data source"))
