"""DCP checkpoints of the FSDP backend: sharded model + optimizer state, scheduler and RNG per rank.

``self`` below is the :class:`rl_train_fsdp.engine.FSDPBackend` (its ``save_checkpoint`` / ``load_checkpoint``
call these). Only tensors go through DCP (:mod:`rl_train_fsdp.dcp_io`); the optimizer's non-tensor values are
JSON (``optim_plain.json``), the scheduler and RNG state tensors read back with ``weights_only=True``.
"""

from __future__ import annotations

import contextlib
import warnings
from pathlib import Path
from typing import Any

import torch
from rl_core.checkpoints import safe_load, save_tensors

from rl_train_fsdp import offload, sharding
from rl_train_fsdp.dcp_io import PLAIN_FILE, load_dcp, read_plain, save_dcp, write_plain


def save(self, path: str, scheduler: dict[str, Any] | None) -> None:
    """Sharded model + optimizer state (torch.distributed.checkpoint), scheduler and RNG per rank.

    ``path/dcp/`` holds the DCP checkpoint (loadable on another number of
    ranks; tensors only, see :mod:`rl_train_fsdp.dcp_io`), ``path/optim_plain.json``
    the optimizer's non-tensor values; ``path/extra_rank{r}.pt`` the scheduler and RNG state as
    tensors and plain data (the schedule itself is rebuilt from the
    config, not pickled), read back with ``weights_only=True``.
    """
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_state_dict

    root = Path(path)
    if self.rank == 0:
        root.mkdir(parents=True, exist_ok=True)
    sharding.barrier()
    if self.optimizer is not None:
        model_sd, optim_sd = get_state_dict(self.model, self.optimizer, options=_state_options(self))
    else:
        model_sd, optim_sd = get_model_state_dict(self.model), None
    if self.param_offload or self.optimizer_offload:  # host buffers are views into pinned segments: their own bytes only
        model_sd, optim_sd = _own_storages(model_sd), _own_storages(optim_sd)
    with _quiet_dcp():
        plain = save_dcp(str(root / "dcp"), model_sd, optim_sd)  # tensors only
    if plain is not None and self.rank == 0:
        write_plain(str(root / PLAIN_FILE), plain)  # step counts, hyper-parameters: JSON, never pickled
    extra = {
        "role": self.role,
        "world_size": self.world_size,
        "scheduler": scheduler,
        "rng": _rng_state(self.device),
    }
    save_tensors(extra, str(root / f"extra_rank{self.rank}.pt"))
    sharding.barrier()

def load(self, path: str) -> dict[str, Any] | None:
    """Restore what :func:`save` wrote (bit-identical on the same number of ranks); the scheduler state."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_state_dict, set_model_state_dict, set_state_dict

    root = Path(path)
    if not (root / "dcp").is_dir():
        raise FileNotFoundError(f"{self.role}: no checkpoint at {str(root)!r} (expected {str(root / 'dcp')!r} written by save_checkpoint)")
    # .metadata is rebuilt from an exact list of torch's classes and only tensors are read (rl_train_fsdp.dcp_io)
    if self.optimizer is not None:
        options = _state_options(self)
        model_sd, optim_sd = get_state_dict(self.model, self.optimizer, options=options)
        with _quiet_dcp():
            load_dcp(str(root / "dcp"), model_sd, optim_sd, read_plain(str(root / PLAIN_FILE)))
        set_state_dict(self.model, self.optimizer, model_state_dict=model_sd, optim_state_dict=optim_sd, options=options)
        if self.optimizer_offload:
            offload.move_optimizer_state(self.optimizer, torch.device("cpu"))
    else:
        model_sd = get_model_state_dict(self.model)
        with _quiet_dcp():
            load_dcp(str(root / "dcp"), model_sd)
        set_model_state_dict(self.model, model_sd)
    extra_path = root / f"extra_rank{self.rank}.pt"
    if not extra_path.is_file():  # resumed on more ranks than saved: take rank 0's scheduler, keep fresh RNG
        extra_path, restore_rng = root / "extra_rank0.pt", False
    else:
        restore_rng = True
    extra = safe_load(str(extra_path))
    if restore_rng:
        _set_rng_state(extra["rng"], self.device)
    sharding.barrier()
    return extra.get("scheduler")

def _own_storages(obj: Any) -> Any:
    """``obj`` (a state dict, nested) with every tensor on a storage of its own bytes (rl_train_fsdp.offload.own_storage)."""
    if isinstance(obj, dict):
        return {k: _own_storages(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_own_storages(v) for v in obj]
    return offload.own_storage(obj) if isinstance(obj, torch.Tensor) else obj


def _state_options(self):
    """LoRA: the checkpoint holds the adapters and their AdamW state only (the frozen base is model.path's)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(ignore_frozen_params=True, strict=False) if self.lora else None


@contextlib.contextmanager
def _quiet_dcp():
    """DCP warns that it 'assumes a single process' when there is no process group: that is the intent here."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"torch\.distributed is disabled, unavailable or uninitialized")
        yield


def _rng_state(device: torch.device) -> dict[str, Any]:
    state: dict[str, Any] = {"cpu": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def _set_rng_state(state: dict[str, Any], device: torch.device) -> None:
    torch.set_rng_state(state["cpu"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)
