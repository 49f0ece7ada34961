"""LoRA's terms of the plan's memory and disk estimates (issue #32): the ``memory`` and ``alternatives`` of rl-lora's
``FeatureCard`` (:mod:`rl_core.plan.features`), which the kernel's estimates ask instead of a full fine-tune's.

Bytes per rank, ``P`` parameters, ``S`` ranks sharing the train states, ``c`` bytes of the compute dtype, ``A``
adapter parameters (:func:`adapter_params`): the frozen base in the compute dtype ``cP/S`` (no float32 master copy,
no moments, no gradients), the adapters float32 ``4A`` + moments ``8A`` + gradients ``4A``; the reference policy is
the same model with its adapters off (no second copy) and autocast has no weights to cast
(``MemoryTerms.trainable``: the kernel's estimates read that the base is frozen). Host memory and the disk
(:mod:`rl_memory_estimate.host`, :mod:`rl_memory_estimate.disk`) read ``A`` from the same terms.
"""

from __future__ import annotations

from typing import Any

import attrs
from rl_core.plan.features import MemoryTerms

#: the linear layers of a llama / qwen2 block, (inputs, outputs) in terms of the shape
_LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def _in_out(shape: Any, name: str) -> tuple[int, int]:
    h, q, kv, i = shape.hidden, shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim, shape.intermediate
    return {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h), "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}[name]


def adapter_params(shape: Any, rank: int, target_modules: Any = "all-linear", exclude_modules: Any = ()) -> int:
    """LoRA parameters ``rank x (inputs + outputs)`` of each targeted linear layer of every block."""
    names = _LINEARS if target_modules == "all-linear" else [n for n in target_modules if n in _LINEARS]
    names = [n for n in names if n not in set(exclude_modules or ())]
    return shape.layers * rank * sum(sum(_in_out(shape, n)) for n in names)


def memory_terms(config: Any, shape: Any, S: int, c: int) -> MemoryTerms | None:
    """The actor's train states under LoRA (None with ``model.lora_rank`` 0: a full fine-tune's, the kernel's)."""
    m = config.model
    if m.lora_rank <= 0:
        return None
    P = getattr(shape, "train_params", shape.params)  # expert parallelism: the routed experts' share on a rank
    A = adapter_params(shape, m.lora_rank, m.target_modules, m.exclude_modules)
    return MemoryTerms(states={f"actor base parameters (frozen, {c * 8}-bit)": c * P / S, f"LoRA adapters ({A / 1e6:.1f}M) + AdamW state": 12 * A},
                       update={"LoRA adapter gradients (update)": 4 * A}, trainable=A)


def alternatives(config: Any) -> list[tuple[str, Any]]:
    """For a full fine-tune that does not fit: LoRA at rank 32 on every linear layer (the estimate says whether it fits)."""
    m = config.model
    if m.lora_rank > 0:
        return []
    return [("LoRA: model.lora_rank=32 model.lora_alpha=64 (frozen base in the compute dtype, adapters only)",
             attrs.evolve(config, model=attrs.evolve(m, lora_rank=32, lora_alpha=64.0, target_modules="all-linear")))]
