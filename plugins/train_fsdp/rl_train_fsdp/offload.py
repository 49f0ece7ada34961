"""CPU offload between phases on one device: ``actor.fsdp_config.param_offload`` / ``optimizer_offload`` (verl's names,
issue #32). The mechanisms are rl-offload's, shared with the megatron backend: :mod:`rl_offload.offload`; here the
switches a role's ``fsdp_config`` gives (:func:`offload_modes`) and the backend's phases and step over them
(:class:`Offload`, mixed into :class:`rl_train_fsdp.engine.FSDPBackend`)."""

from __future__ import annotations

import contextlib

import torch
from rl_offload.offload import CHUNK_BYTES, move_optimizer_state, move_params, own_storage, streamed_step

__all__ = ["CHUNK_BYTES", "Offload", "move_optimizer_state", "move_params", "offload_modes", "own_storage", "role_offload_config", "streamed_step"]


def role_offload_config(role: str, config):
    """The role's offload switches: ``actor.fsdp_config`` / ``critic.fsdp_config``; the reference has none."""
    return {"actor": config.actor.fsdp_config, "critic": getattr(config.critic, "fsdp_config", None)}.get(role)


def offload_modes(role: str, fcfg, sharded: bool) -> tuple[bool, bool, bool]:
    """``(param_offload, optimizer_offload, host_offload)`` of a trainable role from its ``fsdp_config`` switches
    (``fcfg``; None: no offload).

    Sharded, any of param_offload / optimizer_offload / offload_policy is FSDP2's CPUOffloadPolicy (sharded
    parameters, gradients, AdamW state and its step on the host: ``host_offload``). On one unsharded device
    param_offload / optimizer_offload are rl_train_fsdp.offload's mechanisms, and offload_policy (verl's FSDP2 switch
    for everything on the host) turns both on.
    """
    if role not in ("actor", "critic") or fcfg is None:
        return False, False, False
    param, optim, policy = bool(fcfg.param_offload), bool(fcfg.optimizer_offload), bool(getattr(fcfg, "offload_policy", False))
    if sharded:
        return False, False, param or optim or policy
    return param or policy, optim or policy, False


class Offload:
    """:meth:`on_device` and :meth:`step` over the backend's ``param_offload`` / ``optimizer_offload``."""

    @contextlib.contextmanager
    def on_device(self, phase: str):
        """param_offload: the weights on the device for the phase, in host memory after (rl_train_fsdp.offload)."""
        if not self.param_offload:
            yield
            return
        move_params(self.model, self.device)
        try:
            yield
        finally:
            move_params(self.model, torch.device("cpu"))

    def step(self) -> None:
        if self.optimizer_offload:
            streamed_step(self.optimizer, self.device, self.offload_chunk_bytes)
            self.optimizer.zero_grad(set_to_none=True)
        else:
            super().step()
