"""`rlcore check` rules of exact mode and deterministic runs (:mod:`rl_core.rollout.exact`, docs/exact.md).

:func:`exact_problems` (a ``values``-stage check this module registers): ``rollout.exact=true`` needs the hf
rollout and a train backend that computes its log-probs with :func:`rl_core.rollout.exact.sequence_log_probs`
(fsdp), the rollout's log-probs on, and none of the features whose log-probs take another path (LoRA adapters
merged into the rollout's weights, multi-turn rollouts, Ulysses sequence parallelism).
"""

from __future__ import annotations

from typing import Any

from rl_core.cards import CheckCard
from rl_core.hookspecs import hookimpl
from rl_core.problems import Problem

KEY = "rollout.exact"
EXACT_ROLLOUTS = ("hf",)
EXACT_TRAIN = ("fsdp",)


def exact_problems(config: Any, registry: Any = None) -> list[Problem]:
    if not config.rollout.exact:
        return []
    off = f"or set {KEY}=false"
    problems = []
    if config.rollout.name not in EXACT_ROLLOUTS:
        problems.append(Problem(key="rollout.name", what=f"is {config.rollout.name!r} but {KEY}=true runs only with the hf rollout (it recomputes "
                                "the sampled sequences' log-probs with the trainer's per-sequence forward)",
                                fix=f"set rollout.name=hf, {off} (docs/exact.md lists each engine's measured gap and the settings that reduce it)"))
    if config.train.name is not None and config.train.name not in EXACT_TRAIN:
        problems.append(Problem(key="train.name", what=f"is {config.train.name!r} but {KEY}=true needs a train backend whose forward is the "
                                "canonical per-sequence one (fsdp)", fix=f"set train.name=fsdp, {off}"))
    if not config.rollout.calculate_log_probs:
        problems.append(Problem(key="rollout.calculate_log_probs", what=f"is false but {KEY}=true is about the rollout's log-probs",
                                fix=f"set rollout.calculate_log_probs=true, {off}"))
    for key, on, why in (
        ("model.lora_rank", config.model.lora_rank > 0, "the rollout merges the adapters into its weights, the trainer adds them per layer"),
        ("rollout.multi_turn.enable", config.rollout.multi_turn.enable, "multi-turn responses hold tool tokens the per-sequence forward does not separate"),
        ("actor.ulysses_sequence_parallel_size", config.actor.ulysses_sequence_parallel_size > 1, "each rank holds part of a sequence"),
    ):
        if on:
            problems.append(Problem(key=key, what=f"is on with {KEY}=true: {why}, so the two log-probs could not be equal",
                                    fix=f"turn {key} off, {off}"))
    return problems


@hookimpl
def rl_core_register_checks(register) -> None:
    register(CheckCard(name="exact", stage="values", order=60, factory=f"{__name__}:exact_problems",
                       description="rollout.exact: the hf rollout and the fsdp backend, log-probs on, no LoRA / multi-turn / Ulysses"))
