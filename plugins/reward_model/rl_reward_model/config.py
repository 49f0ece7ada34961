"""rl-reward-model's config sections (registered as ConfigSectionCards: rl_core.config.sections), read and checked with
core's own sections: ``reward_model`` (the model-based reward, its model and its workers) and ``reward_model.judge``
(the generative judge's settings)."""

from __future__ import annotations

from typing import Any

import attrs
from attrs import field

from rl_core.config.schema import choice, num, pos, text
from rl_core.config.sections import Sectioned


@attrs.frozen(kw_only=True)
class RewardModelModelConfig:
    path: str = ""
    tokenizer_path: str | None = None  # null: reward_model.model.path
    # a Jinja chat template (the text, or the path of a .jinja file) for the reward model's tokenizer; null: its own
    chat_template: str | None = None
    dtype: str | None = choice(None, ("float32", "bfloat16", "float16", "auto"), hint="null: model.dtype")
    trust_remote_code: bool = False


@attrs.frozen(kw_only=True)
class RewardModelConfig(Sectioned):
    """A model-based reward (rl-reward-model, rl_reward_model.role): a sequence classifier, a generative judge, or a plugin's
    (a plugin's own settings: its section under this one, e.g. rl-reward-model's ``reward_model.judge``)."""

    SECTION_KEY = "reward_model"

    enable: bool = False
    name: str = text("classifier", hint="a registered reward model: classifier, judge, or a plugin's (rlcore plugins)")
    model: RewardModelModelConfig = field(factory=RewardModelModelConfig)
    # template the (prompt, response) chat with the reward model's own chat template; false: prompt + response text
    apply_chat_template: bool = True
    micro_batch_size_per_gpu: int = pos(8, hint="sequences per reward-model forward")
    # null: the reward model's context (its max_position_embeddings), what verl's served reward model scores
    max_length: int | None = pos(4096, hint="tokens per reward-model input; longer ones keep their end; null: the model's context")
    # colocated with the actor on a GPU: moved to the CPU between uses (null: on when it shares a GPU)
    offload: bool | None = None
    # replicate: each worker holds the whole model; fsdp: sharded over the workers that hold it (torch FSDP2)
    strategy: str = choice("replicate", ("replicate", "fsdp"))
    # a resource pool of its own (rl_core.placement.pools): null = in the actor's workers, on their devices
    n_gpus_per_node: int | None = pos(None, hint="devices of the reward model's own workers per node; null shares the actor's")
    nnodes: int = pos(1)
    options: dict[str, Any] = field(factory=dict)  # passed to a plugin's reward model


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


