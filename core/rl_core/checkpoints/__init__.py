"""Checkpoint helpers for train plugins (public API; the on-disk format and loading live in
:mod:`rl_core.checkpoints.store`, re-exported here so plugins need no core internals).

==========================  ==========================================================
name                        what
==========================  ==========================================================
``safe_load(path)``         ``torch.load`` of plain tensors and data only (``weights_only``)
``check_dcp_metadata(dir)`` refuse a ``torch.distributed.checkpoint`` folder whose
                            metadata pickle names anything but DCP's own classes
``save_rng_state()``        Python, numpy and torch RNG state as plain data
``load_rng_state(state)``   restore it
``save_tensors(obj, path)`` ``torch.save`` of plain tensors and data, atomically
                            (a full disk is an ``OSError``, nothing half-written)
``save_dcp`` / ``load_dcp`` a ``torch.distributed.checkpoint`` of tensors only, and the
                            optimizer's non-tensor values as JSON (``write_plain`` /
                            ``read_plain`` at ``PLAIN_FILE``), :mod:`rl_core.checkpoints.dcp_io`
``copy_state(obj)``         a detached copy of every tensor in a nested state dict
``CheckpointError``         a checkpoint that cannot be used (a user error)
==========================  ==========================================================
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from rl_core.checkpoints.store import CheckpointError, check_dcp_metadata, load_rng_state, safe_load, save_rng_state, save_tensors
from rl_core.checkpoints.dcp_io import PLAIN_FILE, load_dcp, read_plain, save_dcp, write_plain

__all__ = [
    "copy_state",
    "PLAIN_FILE", "CheckpointError", "check_dcp_metadata", "load_dcp", "load_rng_state", "read_plain", "safe_load", "save_dcp",
    "save_rng_state", "save_tensors", "write_plain",
]


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
