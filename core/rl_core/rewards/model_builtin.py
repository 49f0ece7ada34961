"""Registers the built-in model-based rewards: ``classifier`` (a learned reward model) and ``judge`` (an LLM judge)."""

from __future__ import annotations

from rl_core.cards import RewardModelCard
from rl_core.hookspecs import hookimpl
from rl_core.rewards.model_checks import classifier_problems, judge_problems

CLASSIFIER = RewardModelCard(
    name="classifier",
    factory="rl_core.rewards.classifier:factory",
    description="a sequence-classification reward model (AutoModelForSequenceClassification) with its own tokenizer and chat template",
    checks=(classifier_problems,),
)

JUDGE = RewardModelCard(
    name="judge",
    factory="rl_core.rewards.judge:factory",
    description="an LLM judge on a rollout engine chosen by name (reward_model.judge.engine); its answer parsed into a score",
    checks=(judge_problems,),
)


@hookimpl
def rl_core_register_reward_models(register):
    register(CLASSIFIER)
    register(JUDGE)
