"""The memory estimate's reward-model terms (``RewardModelCard.memory``): what each card holds beyond a
plain forward of the model at ``reward_model.model.path`` (:func:`rl_core.plan.memory.reward_model_terms`)."""

from __future__ import annotations

from typing import Any


def classifier_memory(config: Any, shape: Any, dtype_bytes: float) -> tuple[float, float]:
    """A classifier's head is one row, not the LM head; nothing beyond the forward."""
    params = shape.params if shape.tied else shape.params - shape.vocab * shape.hidden
    return params, 0.0


def judge_memory(config: Any, shape: Any, dtype_bytes: float) -> tuple[float, float]:
    """The whole model, and its engine's KV cache for one micro-batch of prompts + answers."""
    rm = config.reward_model
    # max_length null (the model's context): the longest prompt + response the run makes
    length = rm.max_length or config.data.max_prompt_length + config.data.max_response_length
    kv = rm.micro_batch_size_per_gpu * (length + rm.judge.max_new_tokens) * shape.layers * 2 * shape.kv_heads * shape.head_dim * dtype_bytes
    return shape.params, float(kv)
