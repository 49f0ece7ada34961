"""The actor's LoRA members of the FSDP backend (issue #32, rl_lora; mixed into :class:`rl_train_fsdp.engine.FSDPBackend`).

The base weights are frozen in the compute dtype and only the float32 adapters train. The reference policy is the same
model with its adapters off (no second copy); a rollout engine with a LoRA API gets the frozen base once
(:meth:`LoraMembers.named_base_weights`) and then the live adapters (:meth:`LoraMembers.lora_adapter`); the weight
sync check compares what was sent with ``W + scale * B @ A`` (:meth:`LoraMembers.sample_weights`). The merged weights
and the adapter folder: :mod:`rl_train_fsdp.weights`.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch

from rl_train_fsdp import sharding


class LoraMembers:
    """TrainBackend's LoRA members over ``self.lora`` (the actor with ``model.lora_rank`` > 0) and ``self.model``."""

    def reference_policy(self):
        """LoRA: the same model with its adapters off (the base policy); no second copy is loaded."""
        if not self.lora:
            raise RuntimeError(f"the {self.role} model has no LoRA adapters: the reference policy needs a ref model of its own (model.lora_rank=0)")
        from rl_lora.adapters import adapters_disabled

        return self._native_routing(adapters_disabled(self.model))

    @contextlib.contextmanager
    def _native_routing(self, inner):
        """The reference policy routes natively (verl's ref.router_replay.mode defaults to disabled), also when it is
        this model with its LoRA adapters off under actor.router_replay."""
        rr, self.router_replay = self.router_replay, None
        try:
            with inner:
                yield
        finally:
            self.router_replay = rr

    def named_base_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """LoRA: the frozen base weights (HF names, adapters not folded in; every rank drains it), for an engine that
        applies the adapters itself (rollout.lora_sync=adapter)."""
        from rl_lora.adapters import iter_base

        return iter_base(self.model, sharding.full_tensor)

    def lora_adapter(self, dtype: torch.dtype | None = None) -> tuple[dict[str, torch.Tensor], dict] | None:
        """LoRA: the live adapters (in ``dtype``, default float32) and their PEFT config as rollout engines' LoRA APIs
        take them (rl_lora.adapters.engine_adapter)."""
        if not self.lora:
            return None
        from rl_lora.adapters import engine_adapter

        return engine_adapter(self.model, sharding.full_tensor, dtype)

    def sample_weights(self, positions: dict[str, torch.Tensor]) -> dict[str, torch.Tensor] | None:
        """The weights of the policy being trained at flat ``positions``, computed apart from :meth:`named_weights`
        (the trainer's side of rl_core.weight_sync_check); None without LoRA (named_weights are the parameters)."""
        if not self.lora:
            return None
        from rl_lora.adapters import sample_effective

        return sample_effective(self.model, positions, sharding.full_tensor)
