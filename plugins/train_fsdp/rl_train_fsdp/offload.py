"""CPU offload between phases on one device: ``actor.fsdp_config.param_offload`` / ``optimizer_offload`` (verl's names,
issue #32). The mechanisms are core's, shared with the megatron backend: :mod:`rl_core.train_engine.offload`."""

from __future__ import annotations

from rl_core.train_engine.offload import CHUNK_BYTES, move_optimizer_state, move_params, own_storage, streamed_step

__all__ = ["CHUNK_BYTES", "move_optimizer_state", "move_params", "own_storage", "streamed_step"]
