"""rl-reward-model's config section ``reward_model.judge`` (registered as a ConfigSectionCard: rl_core.config.sections):
the generative judge's settings, read and checked with core's own sections."""

from __future__ import annotations

from typing import Any

import attrs
from attrs import field

from rl_core.config.schema import num, pos, text


@attrs.frozen(kw_only=True)
class JudgeConfig:
    """A generative judge (``reward_model.name=judge``, this package; docs/reward-models.md): data only."""

    engine: str = "hf"  # a rollout engine by name (a registered rollout card) that runs the judge's model
    # the judge's prompt: {prompt} (the policy's prompt as text), {response}, {ground_truth} are filled in
    template: str = text(
        "Rate the response to the question from 0 to 10.\nQuestion: {prompt}\nResponse: {response}\nScore:",
        hint="a prompt with {prompt} and {response}",
    )
    # a regular expression: the first group of its LAST match in the judge's output is the score
    score_pattern: str = text(r"(-?\d+(?:\.\d+)?)", hint="a regular expression with one group, e.g. (\\d+)")
    score_min: float = 0.0  # scores are mapped from [score_min, score_max] to [0, 1]; outside is a parse failure
    score_max: float = 10.0
    max_new_tokens: int = pos(32)
    timeout_s: float = num(120.0, gt=0, hint="seconds per judge call (one micro-batch), e.g. 120")
    engine_kwargs: dict[str, Any] = field(factory=dict)  # the judge engine's rollout.engine_kwargs


