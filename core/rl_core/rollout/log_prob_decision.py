"""Whether the rollout returns its log-probs: settled once per run in the Plan (:func:`decide`), asked per step
(:func:`wanted`). Torch-free, so the resolver imports it at the top; the gap metrics are rl-rollout-correction's."""

from __future__ import annotations

from typing import Any

import attrs

from rl_core.problems import Problem

#: ``rollout.calculate_log_probs=null`` with nothing that needs them: log-probs on steps 1, 1 + GAP_EVERY, ... only.
#: A whole step, not a few prompts of each: the cost is then exactly 1/GAP_EVERY of asking every step on any engine
#: (vLLM's sampler computes the batch's log-softmax once any request in it asks), and the step's metrics are complete.
GAP_EVERY = 10


def log_prob_users(config: Any, estimator_reads: bool = False, users: tuple[str, ...] | list[str] = ()) -> list[str]:
    """The keys that need the rollout's log-probs every step (``estimator_reads``: the estimator reads the sampling
    policy's log-probs; without them a step runs an old-log-prob pass; ``users``: a feature's keys, rl-rollout-correction's
    ``log_prob_users(config)``)."""
    on = {"rollout.exact": config.rollout.exact, f"algorithm.adv_estimator={config.algorithm.adv_estimator}": estimator_reads}
    return [*users, *(key for key, yes in on.items() if yes)]


def decide(config: Any, *, estimator_reads: bool = False, users: tuple[str, ...] | list[str] = ()) -> Any:
    """``config`` with ``rollout.calculate_log_probs=null`` made true where something needs the log-probs; left null
    otherwise (every ``GAP_EVERY``-th step, on every backend: the hf rollout's cost 3% of the reference step on an H200,
    bench/results/kernel_gpu_h200_s20)."""
    r = config.rollout
    if r.calculate_log_probs is not None or not log_prob_users(config, estimator_reads, users):
        return config
    return attrs.evolve(config, rollout=attrs.evolve(r, calculate_log_probs=True))


def forced_off_problems(config: Any, users: tuple[str, ...] | list[str] = ()) -> list[Problem]:
    """``rollout.calculate_log_probs=false`` where a key needs the log-probs every step: an error naming the keys."""
    users = log_prob_users(config, users=users)
    if config.rollout.calculate_log_probs is not False or not users:
        return []
    return [Problem(key="rollout.calculate_log_probs", what=f"is false but {', '.join(users)} need(s) the rollout's log-probs every step",
                    fix="set rollout.calculate_log_probs=true or null (auto), or unset " + ", ".join(users))]


def wanted(config: Any, step: int) -> bool:
    """Whether step ``step`` (1-based) asks the rollout for its log-probs, by the Plan's config (:func:`decide`)."""
    on = config.rollout.calculate_log_probs
    return on if on is not None else (step - 1) % GAP_EVERY == 0
