"""rl-rollout-correction's check of algorithm.rollout_correction (a CheckCard, run once against the plan): log-probs
on and returned by the rollout backend, thresholds that parse."""

from __future__ import annotations

from typing import Any

from rl_core.problems import Problem

from rl_rollout_correction.options import correction_on, parse_is_threshold, parse_rs
from rl_rollout_correction.precision import apply_defaults


def check(config: Any, registry: Any) -> list[Problem]:
    """:func:`config_problems` of the config as the Plan resolves it (``rollout.precision=fp8``'s defaults applied) with
    the rollout card of ``registry`` (the check's): whether it returns log-probs."""
    card = registry.cards.get("rollout", {}).get(config.rollout.name)
    return config_problems(apply_defaults(config), card.logprobs if card is not None else None)


def config_problems(config: Any, rollout_logprobs: bool | None = None) -> list:
    """Problems with ``algorithm.rollout_correction`` in a run config; ``rollout_logprobs``: whether the rollout card
    returns log-probs (None: unknown, not checked)."""

    rc = config.algorithm.rollout_correction
    key = "algorithm.rollout_correction"
    problems = []
    if not correction_on(config):
        return problems
    if config.rollout.calculate_log_probs is False:
        problems.append(Problem(
            key="rollout.calculate_log_probs",
            what=f"{key} needs the rollout engine's per-token log-probs, but rollout.calculate_log_probs=false",
            fix="set rollout.calculate_log_probs=true, or set rollout_is and rollout_rs to null",
        ))
    if rollout_logprobs is False:
        problems.append(Problem(
            key="rollout.name", what=f"rollout backend {config.rollout.name!r} does not return log-probs, which {key} needs",
            fix="pick a rollout backend whose card declares log-probs (rlcore plugins lists them) or turn rollout correction off",
        ))
    try:
        if rc.rollout_is is not None:
            parse_is_threshold(rc.rollout_is_threshold)
        if rc.rollout_rs is not None:
            parse_rs(rc.rollout_rs, rc.rollout_rs_threshold)
    except ValueError as exc:
        problems.append(Problem(key=key, what=str(exc), fix="see docs/config.md, 'Rollout correction'"))
    return problems
