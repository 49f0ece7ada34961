"""rl-traces' cards: the step observer that writes the traces (rl_traces.writer) and ``rlcore traces`` (rl_traces.command)."""

from __future__ import annotations

from rl_core import hookimpl
from rl_core.cards import CommandCard, ObserverCard


@hookimpl
def rl_core_register_observers(register):
    register(ObserverCard(name="traces", factory="rl_traces.writer:make", options="rl_traces.options:TracesOptions",
                          description="every step's rollouts (and validation's) as parquet under <output_dir>/traces, within a budget"))


@hookimpl
def rl_core_register_commands(register):
    register(CommandCard(name="traces", factory="rl_traces.command:add_parser",
                         help="rlcore traces RUN_DIR: an offline HTML page of the run's rollouts; --export STEP: a data set"))
