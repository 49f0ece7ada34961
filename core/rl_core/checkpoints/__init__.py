"""Checkpoint helpers for train plugins (public API; the on-disk format and loading live in
:mod:`rl_core.checkpoints.store`, re-exported here so plugins need no core internals).

==========================  ==========================================================
name                        what
==========================  ==========================================================
``safe_load(path)``         ``torch.load`` of plain tensors and data only (``weights_only``)
``read_json(path)``         a JSON file of a checkpoint (plain data; a link, a giant or a
                            broken file is a ``CheckpointError``)
``save_rng_state()``        Python, numpy and torch RNG state as plain data
``load_rng_state(state)``   restore it
``save_tensors(obj, path)`` ``torch.save`` of plain tensors and data, atomically
                            (a full disk is an ``OSError``, nothing half-written)
``copy_state(obj)``         a detached copy of every tensor in a nested state dict
``CheckpointError``         a checkpoint that cannot be used (a user error)
==========================  ==========================================================
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
