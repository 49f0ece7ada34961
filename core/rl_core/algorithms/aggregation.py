"""Loss aggregation: a token-level loss ``[B, T]`` -> one scalar by ``loss_agg_mode`` (docs/algorithms.md has the
modes). An all-masked batch gives 0, never NaN."""

from __future__ import annotations

import torch
from torch import Tensor

from rl_core.algorithms.masked import (
    bool_mask,
    check_same_shape,
    mask_weights,
    safe_div,
    zero_masked,
)
from rl_core.algorithms.options import LOSS_AGG_MODES



def check_loss_agg_mode(mode: str) -> None:
    """Raise ``ValueError`` naming the allowed values unless ``mode`` is one of them."""
    if mode not in LOSS_AGG_MODES:
        allowed = ", ".join(repr(m) for m in LOSS_AGG_MODES)
        raise ValueError(f"loss_agg_mode={mode!r} is not supported; use one of {allowed}")


def agg_loss(
    loss_mat: Tensor,
    mask: Tensor,
    mode: str = "token-mean",
    *,
    norm_length: int | None = None,
    denominator: Tensor | float | None = None,
) -> Tensor:
    """Aggregate ``loss_mat`` ``[B, T]`` (``mask``: 0/1 or float weights) into a 0-d float32 tensor. ``norm_length``: the
    constant of ``seq-mean-token-sum-norm`` (default ``T``); ``denominator`` replaces the local token / sequence count
    (a backend's global count over micro-batches and ranks)."""
    check_loss_agg_mode(mode)
    check_same_shape("loss_mat", loss_mat, mask)
    if loss_mat.dim() != 2:
        raise ValueError(f"loss_mat must be [B, T], got shape {tuple(loss_mat.shape)}")
    w = mask_weights(mask)
    weighted = zero_masked(loss_mat, mask) * w  # [B, T]; NaN at masked positions cannot leak
    if mode == "token-mean":
        return safe_div(weighted.sum(), w.sum() if denominator is None else denominator)
    if mode == "token-sum":
        return weighted.sum()

    seq_valid = bool_mask(mask).any(dim=-1)  # [B]
    n_seq = seq_valid.sum().to(torch.float32) if denominator is None else denominator
    token_sum = weighted.sum(dim=-1)  # [B]
    if mode == "seq-mean-token-sum":
        per_seq = token_sum
    elif mode == "seq-mean-token-mean":
        per_seq = safe_div(token_sum, w.sum(dim=-1))
    else:  # seq-mean-token-sum-norm
        length = loss_mat.shape[-1] if norm_length is None else norm_length
        if length <= 0:
            raise ValueError(f"norm_length must be positive, got {length}")
        per_seq = token_sum / float(length)
    return safe_div(per_seq.sum(), n_seq)
