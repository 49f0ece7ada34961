"""Entry point of rl-reward-rule: registers the reward cards (no heavy imports here)."""

from __future__ import annotations

from rl_core import hookimpl
from rl_core.cards import RewardCard

GSM8K_SOURCES = frozenset({"openai/gsm8k", "gsm8k"})
MATH_SOURCES = frozenset(
    {
        "math",
        "MATH",
        "lighteval/MATH",
        "DigitalLearningGmbH/MATH-lighteval",
        "HuggingFaceH4/MATH-500",
        "math_dapo",
    }
)
# "reasoning_gym/<dataset>" rows are matched by the glob; the bare name too.
REASONING_GYM_SOURCES = frozenset({"reasoning_gym", "reasoning_gym/*"})


@hookimpl
def rl_core_register_rewards(register):
    register(
        RewardCard(
            name="gsm8k",
            factory="rl_reward_rule.gsm8k:score",
            description="GSM8K final number; kwargs: method='strict' (after ####) | 'flexible' (last number)",
            data_sources=GSM8K_SOURCES,
        )
    )
    register(
        RewardCard(
            name="math",
            factory="rl_reward_rule.math_answer:score",
            description="MATH final answer (\\boxed{...}) equivalence with math-verify",
            data_sources=MATH_SOURCES,
        )
    )
    register(
        RewardCard(
            name="format",
            factory="rl_reward_rule.format_reward:score",
            description="structure (regex or think/answer tags) with an optional DAPO over-length penalty",
            fields=frozenset(),
        )
    )
    register(
        RewardCard(
            name="reasoning_gym",
            factory="rl_reward_rule.rgym:score",
            description="reasoning-gym rows scored by the dataset's own score_answer",
            fields=frozenset({"ground_truth", "extra_info"}),
            data_sources=REASONING_GYM_SOURCES,
        )
    )
