"""rl-train-fsdp's config sections ``actor.fsdp_config`` and ``critic.fsdp_config`` (verl's key names, registered as
ConfigSectionCards: rl_core.config.sections): read and checked with core's own sections."""

from __future__ import annotations

import attrs

from rl_core.config.schema import choice, num, pos


@attrs.frozen(kw_only=True)
class FsdpConfig:
    """verl's ``actor.fsdp_config`` offload switches: the actor's weights / AdamW state in host memory
    between phases, on one device (rl_train_fsdp.offload)."""

    param_offload: bool = False  # the actor's parameters live in host memory between phases (log-prob pass, update)
    optimizer_offload: bool = False  # AdamW's state lives in host memory; the step brings it to the device chunk by chunk
    # verl's FSDP2 offload_policy: FSDP2's CPUOffloadPolicy when sharded (parameters, gradients, AdamW state and the step on
    # the host); on one unsharded device the same as param_offload + optimizer_offload (rl_train_fsdp.offload)
    offload_policy: bool = False
    # the dtype the actor's gradients are reduced in across ranks when sharded (FSDP2 MixedPrecisionPolicy.reduce_dtype);
    # bfloat16 halves the reduction's traffic at some precision (verl's fsdp_config.mixed_precision.reduce_dtype)
    reduce_dtype: str = choice("float32", ("float32", "bfloat16"))
    # ranks each model copy is sharded over (hybrid sharding, HSDP: world / fsdp_size replicas); -1: all ranks (plain FSDP)
    fsdp_size: int = num(-1, ge=1, also=(-1,), hint="ranks a model copy is sharded over; -1 for all")
    # actor.pad_to_length's granularity in tokens (verl's fsdp_config.pad_to_length_bucket; rounded up to a multiple of
    # the Ulysses group size)
    pad_to_length_bucket: int = pos(1024, hint="tokens, e.g. 1024")


@attrs.frozen(kw_only=True)
class CriticFsdpConfig:
    """The critic's offload switches (verl's ``critic.model.fsdp_config`` / ``critic.fsdp``): as the actor's."""

    param_offload: bool = False
    optimizer_offload: bool = False
    offload_policy: bool = False
