"""The actor's train-state terms of the memory estimate (rl_core.plan.memory) under LoRA and CPU offload (issue #32).

Bytes per rank, ``P`` parameters, ``S`` ranks sharing the train states, ``c`` bytes of the compute dtype,
``A`` adapter parameters (:func:`adapter_params`):

- full fine-tune: float32 parameters ``4P/S``, AdamW's moments ``8P/S``, gradients ``4P/S`` (update only);
- ``actor.fsdp_config.param_offload`` (rl_train_fsdp.offload): the parameters are in host memory between
  phases but on the device for every log-prob pass and update, so the train phases' peak keeps ``4P/S``
  (what it frees is the generation phase's room);
- ``actor.fsdp_config.optimizer_offload``: AdamW's moments live in host memory; the step brings one chunk of
  at most ``CHUNK`` bytes (1 GiB) to the device at a time (update only);
- LoRA (``model.lora_rank > 0``): the frozen base in the compute dtype ``cP/S`` (no float32 master copy, no
  moments, no gradients), the adapters float32 ``4A`` + moments ``8A`` + gradients ``4A``; the reference
  policy is the same model with its adapters off (no second copy) and autocast has no weights to cast.

Host (CPU) memory taken by offloading is not part of the per-device estimate.
"""

from __future__ import annotations

from typing import Any

import attrs

CHUNK = 1 << 30  # rl_train_fsdp.offload.CHUNK_BYTES: optimizer state brought to the device at once

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


@attrs.frozen(kw_only=True)
class ActorTerms:
    states: dict[str, float]  # held through every phase
    update: dict[str, float]  # held during the update only
    lora: bool  # no reference copy, no autocast weight copy


def actor_terms(config: Any, shape: Any, S: int, c: int) -> ActorTerms:
    m, f = config.model, config.actor.fsdp_config
    P = getattr(shape, "train_params", shape.params)  # expert parallelism: the routed experts' share on a rank
    if m.lora_rank > 0:
        A = adapter_params(shape, m.lora_rank, m.target_modules, m.exclude_modules)
        base = c * P / S
        return ActorTerms(
            states={f"actor base parameters (frozen, {c * 8}-bit)": base, f"LoRA adapters ({A / 1e6:.1f}M) + AdamW state": 12 * A},
            update={"LoRA adapter gradients (update)": 4 * A}, lora=True)
    policy = getattr(f, "offload_policy", False)  # counted as both switches (sharded: FSDP2's CPUOffloadPolicy holds even less)
    param_off, optim_off = f.param_offload or policy, f.optimizer_offload or policy
    states = {("actor parameters (fp32, in host memory while generating)" if param_off else "actor parameters (fp32)"): 4 * P / S,
              "actor AdamW state": 0.0 if optim_off else 8 * P / S}
    update = {"actor gradients (update)": 4 * P / S}
    if optim_off:
        update["AdamW state chunk on the device (offloaded, step)"] = min(8 * P / S, CHUNK)
    return ActorTerms(states=states, update=update, lora=False)


def fitting_alternatives(config: Any, sizes: Any, est: Any, estimate: Any) -> list[str]:
    """For a full fine-tune that does not fit: which of LoRA (rank 32, all-linear) or CPU offload would, with their peaks."""
    if config.model.lora_rank > 0 or est.available is None:
        return []
    m = config.model
    options = [
        ("LoRA: model.lora_rank=32 model.lora_alpha=64 (frozen base in the compute dtype, adapters only)",
         attrs.evolve(config, model=attrs.evolve(m, lora_rank=32, lora_alpha=64.0, target_modules="all-linear"))),
        ("offload: actor.fsdp_config.param_offload=true actor.fsdp_config.optimizer_offload=true",
         attrs.evolve(config, actor=attrs.evolve(config.actor, fsdp_config=attrs.evolve(config.actor.fsdp_config, param_offload=True, optimizer_offload=True)))),
    ]
    out = []
    for label, alt in options:
        other = estimate(alt, sizes, available=est.available, shape=est.shape, alternatives=False)
        verdict = "fits" if other.fits else "does not fit either"
        out.append(f"{label}: peak {other.peak / 2**30:.1f} GiB, {verdict}")
    return out
