"""Registers the model-based rewards: ``classifier`` (a learned reward model) and ``judge`` (an LLM judge), the
``reward_model`` feature core calls them through (and ``reward.weights``), and the check of ``rlcore check`` that
reads the reward model's folder and the judge's engine."""

from __future__ import annotations

from rl_core import hookimpl
from rl_core.cards import CheckCard, ConfigSectionCard, FeatureCard, RewardModelCard

from rl_reward_model.checks import classifier_problems, judge_problems
from rl_reward_model.memory import classifier_memory, judge_memory

CLASSIFIER = RewardModelCard(
    name="classifier",
    factory="rl_reward_model.classifier:factory",
    description="a sequence-classification reward model (AutoModelForSequenceClassification) with its own tokenizer and chat template",
    checks=(classifier_problems,),
    memory=classifier_memory,
)

JUDGE = RewardModelCard(
    name="judge",
    factory="rl_reward_model.judge:factory",
    description="an LLM judge on a rollout engine chosen by name (reward_model.judge.engine); its answer parsed into a score",
    checks=(judge_problems,),
    rollout_key="reward_model.judge.engine",
    memory=judge_memory,
)


@hookimpl
def rl_core_register_features(register):
    register(FeatureCard(name="reward_model", factory="rl_reward_model.feature:enabled", provides="rl_reward_model.feature:FEATURE",
                         keys=("reward_model.enable", "reward.weights"),
                         description="model-based rewards (reward_model.enable) and rule / model weights per data source (reward.weights)"))


@hookimpl
def rl_core_register_reward_models(register):
    register(CLASSIFIER)
    register(JUDGE)


@hookimpl
def rl_core_register_checks(register):
    register(CheckCard(name="reward_model", stage="rules", factory="rl_reward_model.checks:reward_model_problems",
                       description="the reward model's folder, then the judge's engine"))


@hookimpl
def rl_core_register_config_sections(register):
    register(ConfigSectionCard(name="reward_model", factory="rl_reward_model.config:RewardModelConfig",
                               description="the model-based reward: enable, name, its model, batch / length, offload, strategy, own pool"))
    register(ConfigSectionCard(name="reward_model.judge", factory="rl_reward_model.config:JudgeConfig",
                               description="the generative judge's settings (reward_model.name=judge)"))
