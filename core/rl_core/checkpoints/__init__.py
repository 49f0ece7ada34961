"""Checkpoint helpers for train plugins (public API): safe loading, RNG state and atomic saves from
:mod:`rl_core.checkpoints.store`, re-exported so plugins need no core internals, and :func:`copy_state`.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from rl_core.checkpoints.store import CheckpointError, load_rng_state, read_json, safe_load, save_rng_state, save_tensors

__all__ = ["copy_state", "CheckpointError", "load_rng_state", "read_json", "safe_load", "save_rng_state", "save_tensors"]


def copy_state(obj: Any, tensor: Callable[[torch.Tensor], torch.Tensor] | None = None) -> Any:
    """``obj`` (dicts, lists, tuples, tensors, plain values) with every tensor detached and cloned, after ``tensor``
    (e.g. a sharded tensor's local part) when given: a snapshot of a model or optimizer state for comparisons."""
    if isinstance(obj, torch.Tensor):
        return (tensor(obj) if tensor is not None else obj).detach().clone()
    if isinstance(obj, dict):
        return {k: copy_state(v, tensor) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(copy_state(v, tensor) for v in obj)
    return obj
