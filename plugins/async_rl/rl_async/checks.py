"""rl-async's checks of the run plan (a CheckCard, stage ``rules``): what a rollout pool of its own cannot do yet, and
bounded staleness without one."""

from __future__ import annotations

from typing import Any

from rl_core.problems import Problem


def problems(config: Any, registry: Any = None) -> list[Problem]:
    """``async.max_staleness`` > 0 only with a rollout pool of its own (the overlap needs devices the update does not
    use); such a pool does not run multi-turn rollouts."""
    r, stale = config.rollout, config.async_.max_staleness
    if r.n_gpus_per_node is None:
        if stale:
            return [Problem(key="async.max_staleness", what=f"is {stale}: generating while the trainer updates needs a rollout pool of its own",
                            fix="set rollout.n_gpus_per_node (CPU: rollout processes), or async.max_staleness=0")]
        return []
    if r.multi_turn.enable:
        return [Problem(key="rollout.n_gpus_per_node", what="a rollout pool of its own does not run multi-turn rollouts yet",
                        fix="remove rollout.n_gpus_per_node, or rollout.multi_turn.enable=false")]
    return []
