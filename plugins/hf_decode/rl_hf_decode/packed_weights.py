"""One GEMM for q / k / v and one for gate / up: a decoder layer's projections as row slices of one tensor.

The static decoder's step is latency-bound at decode batch sizes (``bench/results/decode_gpu_h100.md``):
every kernel costs a few microseconds whatever its size, so three small GEMMs for q, k and v (two for gate
and up) cost more than one GEMM of their combined size. Packing points each projection's parameter at a
row slice of one tensor (``param.data = packed[a:b]``): the model's own modules, ``state_dict`` and the
weight sync (``param.data.copy_``) work unchanged and write into the packed tensor; nothing is duplicated.

Anything that gives a parameter new storage (``model.to`` on sleep / wake-up, a weight sync that adopts
the trainer's tensors) undoes the packing silently; :func:`still_packed` checks the slices before each
use, and the decoder packs again (and drops graphs captured over the old storage).
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import torch


class LayerPack(NamedTuple):
    """The packed tensors of one decoder layer; ``*_b`` are None without biases, ``gu_w`` without a gate/up MLP."""

    qkv_w: torch.Tensor
    qkv_b: torch.Tensor | None
    qkv_split: tuple[int, int, int]
    gu_w: torch.Tensor | None
    gu_b: torch.Tensor | None


def _pack(params: Sequence[torch.nn.Parameter]) -> torch.Tensor:
    """Concatenate ``params`` along dim 0 and point each at its rows of the result."""
    packed = torch.cat([p.data for p in params], dim=0)
    start = 0
    for p in params:
        rows = p.shape[0]
        p.data = packed[start : start + rows]
        start += rows
    return packed


def _holds(packed: torch.Tensor | None, params: Sequence[torch.nn.Parameter]) -> bool:
    """Every param is still the row slice of ``packed`` that :func:`_pack` made it."""
    if packed is None:
        return True
    base = packed.untyped_storage().data_ptr()
    offset = packed.storage_offset()
    for p in params:
        d = p.data
        if d.untyped_storage().data_ptr() != base or d.storage_offset() != offset or d.dtype != packed.dtype:
            return False
        offset += d.numel()
    return True


def _biases(mods) -> list[torch.nn.Parameter] | None | bool:
    """The projections' biases, None when none has one, False when only some have (not packable)."""
    biases = [m.bias for m in mods]
    if all(b is None for b in biases):
        return None
    return False if any(b is None for b in biases) else biases


def _mlp_mods(layer) -> tuple[torch.nn.Linear, torch.nn.Linear] | None:
    mlp = getattr(layer, "mlp", None)
    if mlp is None or not all(hasattr(mlp, n) for n in ("gate_proj", "up_proj", "down_proj", "act_fn")):
        return None
    return mlp.gate_proj, mlp.up_proj


def pack_layer(layer) -> LayerPack | None:
    """Pack ``layer``'s q / k / v projections (and gate / up, when its MLP has them); None if they do not fit."""
    attn = layer.self_attn
    qkv = (attn.q_proj, attn.k_proj, attn.v_proj)
    if not all(isinstance(m, torch.nn.Linear) for m in qkv):
        return None
    qkv_b = _biases(qkv)
    mlp = _mlp_mods(layer)
    if mlp and not all(isinstance(m, torch.nn.Linear) for m in mlp):
        mlp = None
    gu_b = _biases(mlp) if mlp else None
    if qkv_b is False or gu_b is False:
        return None
    return LayerPack(
        qkv_w=_pack([m.weight for m in qkv]),
        qkv_b=_pack(qkv_b) if qkv_b else None,
        qkv_split=tuple(int(m.weight.shape[0]) for m in qkv),
        gu_w=_pack([m.weight for m in mlp]) if mlp else None,
        gu_b=_pack(gu_b) if gu_b else None,
    )


def still_packed(layer, pack: LayerPack) -> bool:
    """Whether ``layer``'s parameters are still the slices of ``pack`` (nothing gave them new storage)."""
    attn = layer.self_attn
    qkv = (attn.q_proj, attn.k_proj, attn.v_proj)
    if not _holds(pack.qkv_w, [m.weight for m in qkv]):
        return False
    if pack.qkv_b is not None and not _holds(pack.qkv_b, [m.bias for m in qkv]):
        return False
    mlp = _mlp_mods(layer)
    if pack.gu_w is not None and (mlp is None or not _holds(pack.gu_w, [m.weight for m in mlp])):
        return False
    if pack.gu_b is not None and not _holds(pack.gu_b, [m.bias for m in mlp]):
        return False
    return True


HEAD_ROWS = 64  # the lm_head's rows are padded to a multiple of this (an odd vocab makes cuBLAS pick an align1 kernel)


def pad_rows(param: torch.nn.Parameter, multiple: int = HEAD_ROWS) -> torch.Tensor | None:
    """Give ``param`` a zero-padded storage of a multiple of ``multiple`` rows and point it at its first rows.

    Returns the padded tensor (None when the rows are already a multiple): a GEMM against it computes the same
    rows plus zero rows, sliced off afterwards. As with :func:`_pack`, the parameter is a view of the padded
    tensor, so a weight sync (``param.data.copy_``) and a tied embedding (the same Parameter) read and write
    it; the only extra memory is the padding rows (the old storage is freed when nothing else holds it).
    """
    rows = int(param.shape[0])
    padded_rows = -(-rows // multiple) * multiple
    if padded_rows == rows:
        return None
    padded = param.data.new_zeros((padded_rows, *param.shape[1:]))
    padded[:rows].copy_(param.data)
    param.data = padded[:rows]
    return padded


def still_padded(param: torch.nn.Parameter, padded: torch.Tensor) -> bool:
    """Whether ``param`` is still the first rows of ``padded`` (nothing gave it new storage)."""
    return _holds(padded, [param])
