"""`rlcore check` rules of exact mode (:mod:`rl_exact.forward`, docs/exact.md).

:func:`exact_problems` (a ``values``-stage check, registered by :mod:`rl_exact.plugin`): ``rollout.exact=true`` needs a
rollout card and a train card that declare ``exact`` (their log-probs come from the Plan's log-prob forward,
:func:`rl_exact.forward.sequence_log_probs`), the
rollout's log-probs on, and none of the features whose log-probs take another path (LoRA adapters merged into the
rollout's weights, multi-turn rollouts, Ulysses sequence parallelism, compiled decoder layers).
"""

from __future__ import annotations

from typing import Any

from rl_core.problems import Problem

KEY = "rollout.exact"


def _card(registry: Any, kind: str, name: str | None):
    """The named card of ``kind`` (the default train card when ``name`` is None); None when it cannot be told."""
    cards = registry.cards[kind]
    if name is not None:
        return cards.get(name)
    chosen = [c for c in cards.values() if getattr(c, "default", False)] or (list(cards.values()) if len(cards) == 1 else [])
    return chosen[0] if len(chosen) == 1 else None


def _exact_names(registry: Any, kind: str) -> str:
    names = sorted(c.name for c in registry.cards[kind].values() if getattr(c, "exact", False))
    return " or ".join(names) if names else "none installed"


def exact_problems(config: Any, registry: Any) -> list[Problem]:
    if not config.rollout.exact:
        return []
    off = f"or set {KEY}=false"
    problems = []
    for kind, key, name in (("rollout", "rollout.name", config.rollout.name), ("train", "train.name", config.train.name)):
        card = _card(registry, kind, name)
        if card is not None and not card.exact:
            problems.append(Problem(
                key=key, what=f"is {card.name!r}, whose card does not declare exact log-probs, but {KEY}=true",
                fix=f"set {key}={_exact_names(registry, kind)}, {off} (docs/exact.md: each engine's measured gap and the settings that reduce it)"))
    if config.rollout.calculate_log_probs is False:  # null (auto) is on with rollout.exact (rl_core.rollout.log_prob_decision)
        problems.append(Problem(key="rollout.calculate_log_probs", what=f"is false but {KEY}=true is about the rollout's log-probs",
                                fix=f"set rollout.calculate_log_probs=true, {off}"))
    stale = getattr(getattr(config, "async_", None), "max_staleness", 0)  # rl-async's section, when installed
    if stale > 0 and config.rollout.mismatch.max_abs_diff is None:
        problems.append(Problem(
            key="async.max_staleness", what=f"is {stale} with {KEY}=true: the rollout samples with weights up to that "
            "many updates old, so its log-probs are not the trainer's and the exact-mode bound (0) would stop the run at the first stale batch",
            fix=f"set async.max_staleness=0, or a bound that allows staleness (rollout.mismatch.max_abs_diff=...), {off}"))
    for key, on, why in (
        ("model.lora_rank", config.model.lora_rank > 0, "the rollout merges the adapters into its weights, the trainer adds them per layer"),
        ("rollout.multi_turn.enable", getattr(getattr(config.rollout, "multi_turn", None), "enable", False), "multi-turn responses hold tool tokens the per-sequence forward does not separate"),
        ("actor.ulysses_sequence_parallel_size", config.actor.ulysses_sequence_parallel_size > 1, "each rank holds part of a sequence"),
        ("model.compile", config.model.compile, "the trainer's compiled decoder layers fuse other kernels than the rollout's eager forward"),
    ):
        if on:
            problems.append(Problem(key=key, what=f"is on with {KEY}=true: {why}, so the two log-probs could not be equal",
                                    fix=f"turn {key} off, {off}"))
    return problems
