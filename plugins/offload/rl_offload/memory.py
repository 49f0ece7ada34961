"""rl-offload's terms of the plan's estimates: the ``memory``, ``alternatives`` and ``host_terms`` hook of its
``FeatureCard`` (:mod:`rl_core.plan.features`), asked instead of a full fine-tune's where offload is on.

Device, bytes per rank (``P`` parameters, ``S`` ranks sharing the train states): ``param_offload`` keeps the float32
parameters in host memory between phases but on the device for every pass, so the train phases keep ``4P/S``;
``optimizer_offload`` keeps AdamW's moments on the host and the step brings at most :data:`CHUNK` bytes to the device.
``offload_policy`` (FSDP2's CPUOffloadPolicy) counts as both switches.

Host, bytes per node (``k`` processes, ``c`` bytes of the compute dtype, ``A`` LoRA adapter parameters):
``param_offload`` on one GPU pins the parameters, ``4P`` (LoRA: ``cP`` + ``4A``); ``optimizer_offload`` on one GPU
AdamW's moments, ``8P`` (LoRA: ``8A``); any switch on several ranks keeps each rank's shard of parameters, gradients
and AdamW state on the host, ``16P / S`` per process; pinned buffers come from 1 GiB segments
(:class:`rl_offload.offload.HostArena`): up to one segment per kind and process is counted as slack. A checkpoint
writes one-GPU offloaded state from the host buffers themselves (:func:`rl_offload.offload.own_storage`): no copy.
"""

from __future__ import annotations

from typing import Any

import attrs
from rl_core.config.sections import evolve_key
from rl_core.plan.features import MemoryTerms

from rl_offload.checks import SWITCHES

CHUNK = 1 << 30  # rl_offload.offload.CHUNK_BYTES: optimizer state brought to the device at once
SEGMENT_BYTES = 1 << 30  # rl_offload.offload.SEGMENT_BYTES


def _switches(fsdp_config: Any) -> tuple[bool, bool]:
    """(parameters offloaded, optimizer state offloaded) of a role's ``fsdp_config``."""
    policy = bool(getattr(fsdp_config, "offload_policy", False))
    return bool(fsdp_config.param_offload) or policy, bool(fsdp_config.optimizer_offload) or policy


def enabled(config: Any) -> bool:
    """An offload switch is on in ``actor.fsdp_config`` or ``critic.fsdp_config``."""
    return any(getattr(getattr(getattr(config, role), "fsdp_config", None), k, False) for role in ("actor", "critic") for k in SWITCHES)


def memory_terms(config: Any, shape: Any, S: int, c: int) -> MemoryTerms | None:
    """The actor's train states of a full fine-tune with offload (None: no actor switch on). LoRA's terms (rl-lora's
    ``lora`` feature, loaded before ``offload``) take precedence."""
    param_off, optim_off = _switches(config.actor.fsdp_config)
    if not (param_off or optim_off):
        return None
    P = getattr(shape, "train_params", shape.params)  # expert parallelism: the routed experts' share on a rank
    states = {("actor parameters (fp32, in host memory while generating)" if param_off else "actor parameters (fp32)"): 4 * P / S,
              "actor AdamW state": 0.0 if optim_off else 8 * P / S}
    update = {"actor gradients (update)": 4 * P / S}
    if optim_off:
        update["AdamW state chunk on the device (offloaded, step)"] = min(8 * P / S, CHUNK)
    return MemoryTerms(states=states, update=update)


def alternatives(config: Any) -> list[tuple[str, Any]]:
    """For a full fine-tune that does not fit: both offload switches on (the estimate says whether it fits)."""
    fsdp = getattr(config.actor, "fsdp_config", None)  # rl-train-fsdp's section (none without that package)
    if fsdp is None:
        return []
    offload = attrs.evolve(fsdp, param_offload=True, optimizer_offload=True)
    return [("offload: actor.fsdp_config.param_offload=true actor.fsdp_config.optimizer_offload=true",
             evolve_key(config, "actor.fsdp_config", offload))]


def host_terms(config: Any, *, P: int, A: int, c: int, k: int, S: int, lora: bool) -> tuple[dict[str, float], float]:
    """The host bytes per node the actor's offload holds through training, and the bytes per process of the actor's
    train state already on the host that a checkpoint does not copy again (one GPU, a full fine-tune)."""
    param_off, optim_off = _switches(config.actor.fsdp_config)
    terms: dict[str, float] = {}
    if S > 1 and (param_off or optim_off):
        per = (c * P + 16 * A) / S if lora else 16 * P / S
        terms["actor shard on the host (sharded offload: parameters, gradients, AdamW)"] = k * per
        return terms, 0.0
    if param_off:
        terms["actor parameters, pinned (param_offload)"] = k * ((c * P + 4 * A) if lora else 4 * P)
    if optim_off:
        terms["actor AdamW state, pinned (optimizer_offload)"] = k * (8 * A if lora else 8 * P)
    slack = (param_off + optim_off) * SEGMENT_BYTES
    if slack:
        terms["pinned segments' unused tails (at most)"] = k * slack
    return terms, (4 * P if param_off else 0) + (8 * P if optim_off else 0)
