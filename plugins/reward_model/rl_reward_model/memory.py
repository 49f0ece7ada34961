"""The memory estimate's reward-model terms: :func:`reward_model_terms` (the device estimate of rl_core.plan.memory asks
the ``reward_model`` feature for them), and what each card holds beyond a plain forward of the model at
``reward_model.model.path`` (``RewardModelCard.memory``)."""

from __future__ import annotations

from typing import Any

from rl_core.plan.memory import DTYPE_BYTES, model_shape


def reward_model_terms(config: Any, sizes: Any, device: str, card: Any = None) -> dict[str, float]:
    """Bytes per rank of the reward model: ``weights``, one micro-batch's forward, and ``reward model weights (kept)``
    when it stays on the device; empty when off or its shape is unknown. ``card.memory(config, shape, dtype_bytes)``
    gives the parameters it holds and a micro-batch's extra bytes (None: the whole model, a forward)."""
    rm = config.reward_model
    if not rm.enable:
        return {}
    shape = model_shape(rm.model.path)
    if shape is None:
        return {}
    c = DTYPE_BYTES.get(rm.model.dtype or config.model.dtype, 4)
    pools = getattr(sizes, "pools", {}) or {}
    holders = pools["reward_model"][0] if "reward_model" in pools else sizes.world_size
    params, extra = (shape.params, 0.0) if getattr(card, "memory", None) is None else card.memory(config, shape, c)
    weights = c * params / (holders if rm.strategy == "fsdp" and holders > 1 else 1)
    # max_length null (the model's context): the longest prompt + response the run makes
    micro, length = rm.micro_batch_size_per_gpu, rm.max_length or config.data.max_prompt_length + config.data.max_response_length
    # one layer's temporaries of an inference forward (hidden states, attention and MLP intermediates)
    work = micro * length * c * (4 * shape.hidden + 2 * shape.intermediate) + extra
    out = {"weights": weights, "reward model forward (one micro-batch)": float(work)}
    offloaded = rm.offload if rm.offload is not None else device != "cpu"
    if "reward_model" not in pools and (device == "cpu" or not offloaded or rm.strategy == "fsdp"):
        out["reward model weights (kept)"] = weights
    return out


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
