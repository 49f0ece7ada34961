"""rl-exact's cards: the canonical log-prob forward (``rollout.exact``, :mod:`rl_exact.forward`) and its check (:mod:`rl_exact.checks`)."""

from __future__ import annotations

from rl_core import hookimpl
from rl_core.cards import CheckCard, LogProbForwardCard


@hookimpl
def rl_core_register_log_prob_forwards(register) -> None:
    register(LogProbForwardCard(name="exact", factory="rl_exact.forward:sequence_log_probs",
                                description="rollout.exact: one canonical forward per sequence, run by the hf rollout and the fsdp trainer alike"))


@hookimpl
def rl_core_register_checks(register) -> None:
    register(CheckCard(name="exact", stage="values", order=60, factory="rl_exact.checks:exact_problems",
                       description="rollout.exact: rollout and train cards that declare exact log-probs; log-probs on; no LoRA / multi-turn / Ulysses / model.compile"))
