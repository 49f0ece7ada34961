"""The batch contract: one container passed between every stage of the loop.

A :class:`Batch` holds ``tensors`` (a ``TensorDict``, one row per sequence), ``non_tensors`` (per-sample Python
objects as 1-D numpy object arrays) and ``meta`` (run-level values), all fields with the same number of rows
(checked on construction). Operations return new batches sharing tensors unless they must copy (concat, repeat, pad).
Field names follow verl's:

=====================  ========  ==========================================
field                  shape     meaning
=====================  ========  ==========================================
prompts                [B, P]    prompt token ids, left-padded
responses              [B, R]    response token ids, right-padded
input_ids              [B, P+R]  prompts then responses
attention_mask         [B, P+R]  1 on real tokens
position_ids           [B, P+R]  positions (cumsum of the mask - 1)
response_mask          [B, R]    1 on response tokens that count
rollout_log_probs      [B, R]    log-probs reported by the rollout engine
old_log_probs          [B, R]    actor log-probs before the update
ref_log_prob           [B, R]    reference-model log-probs
values                 [B, R]    critic values
token_level_scores     [B, R]    reward model / rule scores (last token)
token_level_rewards    [B, R]    scores minus the KL penalty, if any
advantages, returns    [B, R]    estimator output
=====================  ========  ==========================================

Common non-tensor fields: ``uid`` (shared by a prompt's n samples), ``data_source``, ``ground_truth``,
``extra_info``, ``response_text``.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import torch
from tensordict import TensorDict


class BatchError(ValueError):
    """A batch whose fields disagree, or an operation that cannot apply to it."""


def _as_object_array(name: str, values: Any) -> np.ndarray:
    if isinstance(values, np.ndarray) and values.dtype == object and values.ndim == 1:
        return values
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
        raise BatchError(f"non-tensor field {name!r} must be a sequence with one item per sample, got {type(values).__name__}")
    arr = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        arr[i] = v
    return arr


class Batch:
    __slots__ = ("tensors", "non_tensors", "meta")

    def __init__(
        self,
        tensors: Mapping[str, torch.Tensor] | TensorDict | None = None,
        non_tensors: Mapping[str, Any] | None = None,
        meta: Mapping[str, Any] | None = None,
        *,
        batch_size: int | None = None,
    ) -> None:
        tensors = dict(tensors.items()) if tensors is not None else {}
        non_tensors = {k: _as_object_array(k, v) for k, v in (non_tensors or {}).items()}
        sizes: dict[str, int] = {}
        for k, v in tensors.items():
            if not isinstance(v, torch.Tensor):
                raise BatchError(f"tensor field {k!r} must be a torch.Tensor, got {type(v).__name__}; put Python objects in non_tensors")
            if v.dim() == 0:
                raise BatchError(f"tensor field {k!r} is a scalar; per-batch values belong in meta")
            sizes[k] = v.shape[0]
        sizes.update({k: len(v) for k, v in non_tensors.items()})
        if batch_size is not None:
            sizes.setdefault("<batch_size>", batch_size)
        distinct = set(sizes.values())
        if len(distinct) > 1:
            detail = ", ".join(f"{k}={n}" for k, n in sorted(sizes.items()))
            raise BatchError(f"batch fields disagree on the number of rows: {detail}")
        n = distinct.pop() if distinct else 0
        if batch_size is not None and n != batch_size:
            raise BatchError(f"batch_size={batch_size} but the fields have {n} rows")
        self.tensors = TensorDict(tensors, batch_size=[n])
        self.non_tensors = non_tensors
        self.meta = dict(meta or {})

    # ------------------------------------------------------------------ basics
    def __len__(self) -> int:
        return int(self.tensors.batch_size[0])

    def __contains__(self, key: str) -> bool:
        return key in self.tensors.keys() or key in self.non_tensors

    def __getitem__(self, key: str) -> Any:
        if key in self.non_tensors:
            return self.non_tensors[key]
        try:
            return self.tensors[key]
        except KeyError:
            raise KeyError(f"batch has no field {key!r}; it has {sorted(self.keys())}") from None

    def __setitem__(self, key: str, value: Any) -> None:
        if isinstance(value, torch.Tensor):
            if value.dim() == 0 or value.shape[0] != len(self):
                raise BatchError(f"field {key!r} has {tuple(value.shape)} but the batch has {len(self)} rows")
            self.tensors[key] = value
        else:
            arr = _as_object_array(key, value)
            if len(arr) != len(self):
                raise BatchError(f"field {key!r} has {len(arr)} items but the batch has {len(self)} rows")
            self.non_tensors[key] = arr

    def keys(self) -> list[str]:
        return list(self.tensors.keys()) + list(self.non_tensors)

    def __repr__(self) -> str:
        t = ", ".join(f"{k}{list(v.shape)}:{str(v.dtype).removeprefix('torch.')}" for k, v in self.tensors.items())
        return f"Batch(rows={len(self)}, tensors=[{t}], non_tensors={list(self.non_tensors)}, meta={list(self.meta)})"

    # -------------------------------------------------------------- operations
    def select(self, *keys: str, strict: bool = True) -> "Batch":
        """A batch with only ``keys`` (tensor or non-tensor), sharing storage."""
        missing = [k for k in keys if k not in self]
        if missing and strict:
            raise KeyError(f"batch has no field(s) {missing}; it has {sorted(self.keys())}")
        tensors = {k: self.tensors[k] for k in keys if k in self.tensors.keys()}
        non = {k: self.non_tensors[k] for k in keys if k in self.non_tensors}
        return Batch(tensors, non, self.meta, batch_size=len(self))

    def index(self, idx: slice | Sequence[int] | torch.Tensor | np.ndarray) -> "Batch":
        """Rows ``idx`` (slice, index list or boolean mask)."""
        if isinstance(idx, slice):
            np_idx: Any = idx
            t_idx: Any = idx
        else:
            t_idx = torch.as_tensor(np.asarray(idx))
            if t_idx.dtype == torch.bool and t_idx.shape[0] != len(self):
                raise BatchError(f"boolean mask has {t_idx.shape[0]} items but the batch has {len(self)} rows")
            np_idx = t_idx.numpy()
        tensors = {k: v[t_idx] for k, v in self.tensors.items()}
        non = {k: v[np_idx] for k, v in self.non_tensors.items()}
        n = len(range(*idx.indices(len(self)))) if isinstance(idx, slice) else int(
            t_idx.sum() if t_idx.dtype == torch.bool else t_idx.numel()
        )
        return Batch(tensors, non, self.meta, batch_size=n)

    def chunk(self, chunks: int) -> list["Batch"]:
        """Split into ``chunks`` equal parts; the row count must divide evenly."""
        if chunks <= 0:
            raise BatchError(f"chunk count must be positive, got {chunks}")
        if len(self) % chunks:
            raise BatchError(
                f"cannot split {len(self)} rows into {chunks} equal chunks "
                f"({len(self)} % {chunks} = {len(self) % chunks}); use pad_to_divisor({chunks}) first"
            )
        size = len(self) // chunks
        return [self.index(slice(i * size, (i + 1) * size)) for i in range(chunks)]

    def split(self, size: int) -> list["Batch"]:
        """Consecutive pieces of ``size`` rows (the last may be shorter)."""
        if size <= 0:
            raise BatchError(f"split size must be positive, got {size}")
        return [self.index(slice(i, i + size)) for i in range(0, len(self), size)]

    @staticmethod
    def concat(batches: Iterable["Batch"]) -> "Batch":
        """Stack batches row-wise; they must have the same fields."""
        batches = list(batches)
        if not batches:
            raise BatchError("concat needs at least one batch")
        keys = set(batches[0].keys())
        for i, b in enumerate(batches[1:], 1):
            if set(b.keys()) != keys:
                raise BatchError(f"cannot concat: batch 0 has fields {sorted(keys)}, batch {i} has {sorted(b.keys())}")
        tensors = {}
        for k in batches[0].tensors.keys():
            parts = [b.tensors[k] for b in batches]
            shapes = {tuple(p.shape[1:]) for p in parts}
            if len(shapes) > 1:
                raise BatchError(f"cannot concat field {k!r}: trailing shapes differ {sorted(shapes)}; pad them first")
            tensors[k] = torch.cat(parts)
        non = {k: np.concatenate([b.non_tensors[k] for b in batches]) for k in batches[0].non_tensors}
        return Batch(tensors, non, batches[0].meta)

    def repeat(self, times: int, interleave: bool = True) -> "Batch":
        """Each row ``times`` times: ``aabb`` if ``interleave`` else ``abab``."""
        if times <= 0:
            raise BatchError(f"repeat count must be positive, got {times}")
        if interleave:
            tensors = {k: v.repeat_interleave(times, dim=0) for k, v in self.tensors.items()}
            non = {k: np.repeat(v, times) for k, v in self.non_tensors.items()}
        else:
            tensors = {k: v.repeat(times, *([1] * (v.dim() - 1))) for k, v in self.tensors.items()}
            non = {k: np.tile(v, times) for k, v in self.non_tensors.items()}
        return Batch(tensors, non, self.meta, batch_size=len(self) * times)

    def union(self, other: "Batch") -> "Batch":
        """Fields of both; a field present in both must hold equal values."""
        if len(self) != len(other):
            raise BatchError(f"cannot union batches of {len(self)} and {len(other)} rows")
        tensors = dict(self.tensors.items())
        for k, v in other.tensors.items():
            if k in tensors and not (tensors[k].shape == v.shape and torch.equal(tensors[k], v)):
                raise BatchError(f"cannot union: field {k!r} differs between the two batches")
            tensors[k] = v
        non = dict(self.non_tensors)
        for k, v in other.non_tensors.items():
            if k in non and not all(a == b for a, b in zip(non[k], v)):
                raise BatchError(f"cannot union: field {k!r} differs between the two batches")
            non[k] = v
        return Batch(tensors, non, {**self.meta, **other.meta}, batch_size=len(self))

    def pad_to_divisor(self, divisor: int) -> tuple["Batch", int]:
        """``(padded, pad)``: copies of the first rows appended until ``divisor`` divides the row count (``meta["pad"]``
        marks them; ``unpad(pad)`` drops them)."""
        if divisor <= 0:
            raise BatchError(f"divisor must be positive, got {divisor}")
        if len(self) == 0:
            raise BatchError("cannot pad an empty batch")
        pad = (-len(self)) % divisor
        if pad == 0:
            return self, 0
        idx = [i % len(self) for i in range(pad)]
        padded = Batch.concat([self, self.index(idx)])
        padded.meta["pad"] = pad
        return padded, pad

    def unpad(self, pad: int) -> "Batch":
        out = self.index(slice(0, len(self) - pad)) if pad else self
        out.meta = {k: v for k, v in out.meta.items() if k != "pad"}
        return out

    def to(self, device: str | torch.device) -> "Batch":
        return Batch(self.tensors.to(device), self.non_tensors, self.meta, batch_size=len(self))

    # ---------------------------------------------------------- serialisation
    def to_dict(self) -> dict[str, Any]:
        """Plain dict (for pickling across processes)."""
        return {"tensors": dict(self.tensors.items()), "non_tensors": self.non_tensors, "meta": self.meta}

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> "Batch":
        return Batch(d["tensors"], d["non_tensors"], d["meta"])

    def __getstate__(self):
        return self.to_dict()

    def __setstate__(self, state):
        other = Batch.from_dict(state)
        self.tensors, self.non_tensors, self.meta = other.tensors, other.non_tensors, other.meta
