"""torch distributed-checkpoint (DCP) save and load that never unpickles anything but tensors.

torch's own DCP reader runs ``pickle.load`` on ``.metadata`` and
``torch.load(weights_only=False)`` on every non-tensor value (the optimizer's
hyper-parameters travel that way). A checkpoint folder copied in from
elsewhere could therefore run code on resume. Here:

- only tensors go into the DCP folder (the model and the optimizer's tensor
  state); everything else of the optimizer state (its ``param_groups`` and any
  non-tensor per-parameter value) goes to a JSON file (:data:`PLAIN_FILE`)
  written by :func:`plain_optim_state` and read back with ``json``;
- :func:`load_dcp` reads ``.metadata`` with
  :func:`read_dcp_metadata` (an exact list of
  torch's metadata classes, nothing else resolved) and refuses any non-tensor
  entry instead of unpickling it, so a checkpoint written by an older
  rl-core (which stored the hyper-parameters as pickled bytes) still loads:
  its tensors are read, the pickled values never are.

The optimizer's hyper-parameters (lr, betas, eps, weight decay) always come
from the run's config, not from the checkpoint: a resume under a changed
``*.optim`` config (accepted with ``--resume-anyway``) trains with the new
values. The saved ones are kept in :data:`PLAIN_FILE` for the record.
"""

from __future__ import annotations

import collections
import io
import json
import os
import pathlib
import pickle
import re
from typing import Any

import torch
from rl_core.checkpoints import CheckpointError, read_json

PLAIN_FILE = "optim_plain.json"


def _to_json(value: Any, where: str) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, tuple):
        return {"__tuple__": [_to_json(v, where) for v in value]}
    if isinstance(value, list):
        return [_to_json(v, where) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: _to_json(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, torch.Tensor) and value.numel() <= 1024:
        return {"__tensor__": value.detach().cpu().tolist(), "dtype": str(value.dtype).removeprefix("torch.")}
    raise CheckpointError(f"optimizer state {where} is a {type(value).__name__}, which a checkpoint cannot store as plain data")


def _from_json(value: Any) -> Any:
    if isinstance(value, list):
        return [_from_json(v) for v in value]
    if isinstance(value, dict):
        if set(value) == {"__tuple__"}:
            return tuple(_from_json(v) for v in value["__tuple__"])
        if set(value) == {"__tensor__", "dtype"}:
            dtype = getattr(torch, str(value["dtype"]), None)
            if not isinstance(dtype, torch.dtype):
                raise CheckpointError(f"{PLAIN_FILE} names the dtype {value['dtype']!r}, which is not a torch dtype")
            return torch.tensor(value["__tensor__"], dtype=dtype)
        return {k: _from_json(v) for k, v in value.items()}
    return value


def _tensor_part(optim_sd: dict[str, Any]) -> dict[str, Any]:
    """``{"state": {param: {key: tensor}}}``: what of an optimizer state dict goes into the DCP folder."""
    state = optim_sd.get("state", {})
    return {"state": {p: {k: v for k, v in s.items() if isinstance(v, torch.Tensor)} for p, s in state.items()}}


def plain_optim_state(optim_sd: dict[str, Any]) -> dict[str, Any]:
    """The non-tensor part of an optimizer state dict as JSON-able data (for :data:`PLAIN_FILE`)."""
    state = optim_sd.get("state", {})
    plain = {str(p): {k: _to_json(v, f"state.{p}.{k}") for k, v in s.items() if not isinstance(v, torch.Tensor)} for p, s in state.items()}
    groups = [_to_json(g, f"param_groups.{i}") for i, g in enumerate(optim_sd.get("param_groups", []))]
    return {"format": 1, "state": {p: s for p, s in plain.items() if s}, "param_groups": groups}


def write_plain(path: str, plain: dict[str, Any]) -> None:
    with open(path, "w") as f:
        json.dump(plain, f, indent=1, allow_nan=True)


def read_plain(path: str) -> dict[str, Any] | None:
    """:data:`PLAIN_FILE` parsed with ``json`` (None when an older rl-core wrote the checkpoint without one)."""
    data = read_json(path)
    if data is not None and (not isinstance(data, dict) or not isinstance(data.get("state", {}), dict)):
        raise CheckpointError(f"{path} is not an rl-core optimizer record; delete the checkpoint directory")
    return data


def _safe_reader_and_planner(dcp_dir: str, checked: Any = None):
    """``checked``: the folder's ``.metadata`` already read by :func:`read_dcp_metadata` (not read a second time)."""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
    from torch.distributed.checkpoint.metadata import StorageMeta

    class SafeReader(FileSystemReader):
        """torch's file reader, with ``.metadata`` rebuilt from an exact list of classes instead of ``pickle.load``."""

        def read_metadata(self, *args: Any, **kwargs: Any):
            path = os.fspath(self._get_metadata_path(kwargs.get("rank")))
            md = checked if checked is not None and path == os.path.join(dcp_dir, ".metadata") else read_dcp_metadata(path)
            if getattr(md, "storage_meta", None) is None:
                md.storage_meta = StorageMeta()
            md.storage_meta.load_id = self.load_id
            return md

    class TensorsOnlyPlanner(DefaultLoadPlanner):
        """Tensors only: a non-tensor entry is refused, never given to ``torch.load(weights_only=False)``."""

        def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
            raise CheckpointError(
                f"refused to load {dcp_dir}: its entry {read_item.dest_index.fqn!r} is pickled data, which rl-core never unpickles; "
                "delete the checkpoint directory if you did not expect it there"
            )

    return SafeReader(dcp_dir), TensorsOnlyPlanner()


def save_dcp(dcp_dir: str, model_sd: dict[str, Any], optim_sd: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """Write the model's and the optimizer's tensors to ``dcp_dir``; returns the optimizer's plain part (or None).

    Every rank calls it; rank 0 writes the returned dict with :func:`write_plain`.
    """
    import torch.distributed.checkpoint as dcp

    state: dict[str, Any] = {"model": model_sd}
    plain = None
    if optim_sd is not None:
        state["optim"] = _tensor_part(optim_sd)
        plain = plain_optim_state(optim_sd)
    from torch.distributed.checkpoint.api import CheckpointException

    try:
        dcp.save(state, checkpoint_id=dcp_dir)
    except CheckpointException as exc:  # torch wraps each rank's error: a full disk is an OSError again
        for failure in (getattr(exc, "failures", None) or {}).values():
            inner = failure[0] if isinstance(failure, tuple) else failure
            if isinstance(inner, OSError):
                raise OSError(inner.errno, inner.strerror or str(inner), inner.filename or dcp_dir) from None
        # CheckpointException is a BaseException: as one, it would pass for a signal; a failed save is an error
        raise RuntimeError(f"torch could not save the checkpoint {dcp_dir}: {_last_line(exc)}") from None
    return plain


def _last_line(exc: BaseException) -> str:
    """The last line of the first rank's failure inside a torch CheckpointException (its str holds whole tracebacks)."""
    inner = getattr(exc, "failures", None)
    detail = next(iter(inner.values())) if isinstance(inner, dict) and inner else exc
    detail = detail[0] if isinstance(detail, tuple) else detail
    return (str(detail).strip().splitlines() or [type(detail).__name__])[-1][:300]


def load_dcp(dcp_dir: str, model_sd: dict[str, Any], optim_sd: dict[str, Any] | None = None, plain: dict[str, Any] | None = None) -> None:
    """Fill ``model_sd`` / ``optim_sd`` (templates from ``get_state_dict``) in place from ``dcp_dir`` and ``plain``.

    ``optim_sd["param_groups"]`` is left as it is (the run's config);
    non-tensor per-parameter values come from ``plain`` (:func:`read_plain`).
    A checkpoint that does not fit (another model shape, missing entries) is a
    :class:`CheckpointError` naming the folder.
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException

    if not os.path.isdir(dcp_dir) or os.path.islink(dcp_dir):
        raise CheckpointError(f"no checkpoint at {dcp_dir} (a folder written by save_dcp)")
    request: dict[str, Any] = {"model": model_sd}
    if optim_sd is not None:
        request["optim"] = _tensor_part(optim_sd)
    checked = read_dcp_metadata(os.path.join(dcp_dir, ".metadata"))  # refused here, before torch's loader can print its tracebacks
    reader, planner = _safe_reader_and_planner(dcp_dir, checked)
    try:
        dcp.load(request, storage_reader=reader, planner=planner)
    except CheckpointError:
        raise
    except (CheckpointException, RuntimeError, KeyError, ValueError, AssertionError, OSError) as exc:
        inner = getattr(exc, "failures", None)
        detail = next(iter(inner.values())) if isinstance(inner, dict) and inner else exc
        detail = detail[0] if isinstance(detail, tuple) else detail
        if isinstance(detail, CheckpointError):
            raise detail from None
        first = _last_line(exc)
        raise CheckpointError(
            f"cannot load the checkpoint {dcp_dir} into this model: {first}. It was written for another model "
            "(model.path, its shape or LoRA settings) or is damaged; resume with the config it was written under, "
            "or start over in another trainer.output_dir"
        ) from None
    if optim_sd is not None and plain:
        for p, values in plain.get("state", {}).items():
            if p in optim_sd.get("state", {}) and isinstance(values, dict):
                optim_sd["state"][p].update({k: _from_json(v) for k, v in values.items()})


# ---------------------------------------------- torch distributed checkpoint metadata
# The only global names a torch DCP ``.metadata`` pickle may name (torch 2.x), exactly: no prefix match,
# nothing imported on demand. Each is a dataclass, an enum, torch.Size, a path class or a lookup of a
# layout by name, so rebuilding them calls nothing but those constructors.
_DCP_CLASSES = {
    "torch.distributed.checkpoint.metadata": (
        "Metadata", "TensorStorageMetadata", "TensorProperties", "ChunkStorageMetadata", "BytesStorageMetadata",
        "MetadataIndex", "StorageMeta", "_MEM_FORMAT_ENCODING",
    ),
    "torch.distributed.checkpoint.filesystem": ("_StorageInfo",),
}
_PATH_CLASSES = ("PosixPath", "PurePosixPath", "WindowsPath", "PureWindowsPath")
DCP_METADATA_MAX_BYTES = 2 << 30  # a .metadata larger than this is not one torch wrote
_SAFE_FILE_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


def _dcp_globals() -> dict[tuple[str, str], Any]:
    """``{(module, name): object}`` of every global a DCP metadata pickle may name."""
    import torch.distributed.checkpoint.filesystem as dcp_fs
    import torch.distributed.checkpoint.metadata as dcp_md

    modules = {"torch.distributed.checkpoint.metadata": dcp_md, "torch.distributed.checkpoint.filesystem": dcp_fs}
    out: dict[tuple[str, str], Any] = {}
    for mod, names in _DCP_CLASSES.items():
        for name in names:
            if hasattr(modules[mod], name):
                out[(mod, name)] = getattr(modules[mod], name)
    for name in _PATH_CLASSES:
        out[("pathlib", name)] = out[("pathlib._local", name)] = getattr(pathlib, name)
    out[("torch", "Size")] = torch.Size
    out[("collections", "OrderedDict")] = collections.OrderedDict
    out[("torch.serialization", "_get_layout")] = _layout_by_name
    for name in dir(torch):  # dtypes and memory formats are values, not callables
        value = getattr(torch, name, None)
        if isinstance(value, (torch.dtype, torch.memory_format)):
            out[("torch", name)] = value
    return out


def _layout_by_name(name: Any) -> torch.layout:
    """What ``torch.serialization._get_layout`` does (``"torch.strided"`` -> the layout), for layouts only."""
    layouts = {str(v): v for v in vars(torch).values() if isinstance(v, torch.layout)}
    if not isinstance(name, str) or name not in layouts:
        raise pickle.UnpicklingError(f"it names the layout {name!r}, which is not a torch layout")
    return layouts[name]


class _DCPMetadataUnpickler(pickle.Unpickler):
    """Resolves only the exact names of :func:`_dcp_globals`; anything else stops the load before it is called."""

    _allowed: dict[tuple[str, str], Any] | None = None

    def find_class(self, module: str, name: str) -> Any:
        if _DCPMetadataUnpickler._allowed is None:
            _DCPMetadataUnpickler._allowed = _dcp_globals()
        try:
            return _DCPMetadataUnpickler._allowed[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"it names {module}.{name}, which torch's checkpoint metadata never holds") from None

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("it holds a persistent id, which torch's checkpoint metadata never holds")


def read_dcp_metadata(path: str) -> Any:
    """A DCP ``.metadata`` file as torch's ``Metadata`` object, read without running anything it names.

    Only the classes of torch's checkpoint metadata are rebuilt (an exact
    list of names), the result must be a ``Metadata`` whose storage entries
    name plain files inside the folder; anything else is a :class:`CheckpointError`.
    """
    from torch.distributed.checkpoint.metadata import Metadata

    if os.path.islink(path):
        raise CheckpointError(f"refused to load {path}: it is a symbolic link (rl-core never writes links); delete the checkpoint directory")
    try:
        size = os.path.getsize(path)
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint folder {os.path.dirname(path)} has no {os.path.basename(path)} file") from None
    if size > DCP_METADATA_MAX_BYTES:
        raise CheckpointError(f"refused to load {path}: {size} bytes, more than any torch checkpoint metadata; delete the checkpoint directory")
    try:
        with open(path, "rb") as f:
            md = _DCPMetadataUnpickler(f).load()
        if not isinstance(md, Metadata):
            raise pickle.UnpicklingError(f"it holds a {type(md).__name__}, not torch's checkpoint Metadata")
        for info in (md.storage_data or {}).values():
            rel = getattr(info, "relative_path", None)
            if not isinstance(rel, str) or not _SAFE_FILE_RE.match(rel) or rel in (".", ".."):
                raise pickle.UnpicklingError(f"it points at the file {rel!r}, which is not a file of this folder")
            descriptors = getattr(info, "transform_descriptors", None)
            if descriptors is not None and not all(isinstance(d, str) for d in descriptors):
                raise pickle.UnpicklingError("its transform descriptors are not names")
    except Exception as exc:  # noqa: BLE001 - whatever the pickle holds, it is refused
        raise CheckpointError(
            f"refused to load {path}: {exc}; if you did not put this file there, delete the checkpoint directory"
        ) from None
    return md


def check_dcp_metadata(dcp_dir: str) -> None:
    """Refuse a torch distributed-checkpoint folder whose ``.metadata`` is not plain torch checkpoint metadata."""
    read_dcp_metadata(os.path.join(dcp_dir, ".metadata"))
