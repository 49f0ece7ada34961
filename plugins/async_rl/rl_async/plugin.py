"""rl-async's cards: the rollout pool (its schedule, rl_async.pipeline, and the workers' weight transfer,
rl_async.worker), its config section ``async`` (rl_async.config) and its checks (rl_async.checks)."""

from __future__ import annotations

from rl_core import hookimpl
from rl_core.cards import CheckCard, ConfigSectionCard, RolloutPoolCard

# the worker extension's methods the schedule calls (rl_async.pipeline.METHODS; the plugin module stays light)
METHODS = ("open_weight_rendezvous", "join_weight_group", "send_weights", "receive_weights", "receive_and_generate")


@hookimpl
def rl_core_register_rollout_pools(register):
    register(RolloutPoolCard(name="async", factory="rl_async.pipeline:make", worker="rl_async.worker:WeightTransfer", methods=METHODS,
                             description="a rollout pool of its own: bounded-staleness (one-step off-policy) training, verified weight transfer"))


@hookimpl
def rl_core_register_checks(register):
    register(CheckCard(name="async", factory="rl_async.checks:problems", stage="rules",
                       description="async.max_staleness needs rollout.n_gpus_per_node; a rollout pool runs no multi-turn rollouts"))
    register(CheckCard(name="async_profiler", factory="rl_async.checks:profiler_problems", stage="rules",
                       description="profiler.tool needs a synchronous run (async.max_staleness=0)"))


@hookimpl
def rl_core_register_config_sections(register):
    register(ConfigSectionCard(name="async", factory="rl_async.config:AsyncConfig",
                               description="off-policy training with a rollout pool of its own (docs/async.md)"))
