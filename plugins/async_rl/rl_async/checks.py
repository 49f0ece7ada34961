"""rl-async's checks of the run plan (CheckCards, stage ``rules``): what a rollout pool of its own cannot do yet,
bounded staleness without one, and the profiler with bounded staleness."""

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
    if getattr(getattr(r, "multi_turn", None), "enable", False):  # rl-agent's section
        return [Problem(key="rollout.n_gpus_per_node", what="a rollout pool of its own does not run multi-turn rollouts yet",
                        fix="remove rollout.n_gpus_per_node, or rollout.multi_turn.enable=false")]
    return []


def profiler_problems(config: Any, registry: Any = None) -> list[Problem]:
    """``profiler.tool`` with ``async.max_staleness`` > 0: a step's generation runs during another step's update."""
    stale = config.async_.max_staleness
    if getattr(getattr(config, "profiler", None), "tool", None) is None or stale == 0:  # rl-profiling's section
        return []
    return [Problem(key="profiler.tool", what=f"is set with async.max_staleness={stale}: a step's generation then runs during "
                    "another step's update, so a step's calls cannot be told apart (not supported together)",
                    fix="profile a synchronous run (async.max_staleness=0), or unset profiler.tool")]
