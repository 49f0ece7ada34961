"""Loss aggregation: a token-level loss matrix ``[B, T]`` -> one scalar.

The mode decides how much each token and each sequence weighs, which matters
more than it looks (DAPO, Yu et al. 2025, section 3.3; Dr. GRPO, Liu et al.
2025, "Understanding R1-Zero-Like Training: A Critical Perspective"):

==========================  ===================================================
mode                        loss
==========================  ===================================================
``token-mean``              sum of valid token losses / number of valid tokens
                            (every token weighs the same; DAPO's choice)
``seq-mean-token-sum``      mean over sequences of each sequence's token sum
``seq-mean-token-mean``     mean over sequences of each sequence's token mean
                            (GRPO as written in DeepSeekMath, Shao et al. 2024)
``seq-mean-token-sum-norm`` mean over sequences of (token sum / T), T the max
                            response length: a constant, so no length bias
                            (Dr. GRPO)
``token-sum``               sum of valid token losses, no normaliser (verl's
                            ``token-sum``: the loss scale grows with the batch)
==========================  ===================================================

Departures / choices:

- The ``seq-mean-*`` modes average over sequences that have at least one valid
  token; all-masked rows (e.g. added by ``Batch.pad_to_divisor``) do not
  dilute the loss. An all-masked batch gives a loss of 0 (with a gradient of
  0), never NaN.
- ``seq-mean-token-sum-norm`` divides by ``norm_length`` (default: the padded
  width ``T`` of ``loss_mat``). For the Dr. GRPO behaviour ``T`` must be the
  same every step: pass ``norm_length=data.max_response_length`` when batches
  are padded to the longest response only (verl's ``loss_scale_factor``).
  As in verl 0.9.1 the result is the mean over sequences of ``token sum / T``.
- ``seq-mean-token-mean`` divides each sequence's sum by its token count;
  verl adds ``1e-8`` to that count (a relative difference below 1e-8).
- ``denominator`` replaces the local normaliser (token count for
  ``token-mean``, sequence count for the ``seq-mean-*`` modes) so a backend
  that splits a mini-batch into micro-batches (and ranks) can divide by the
  global count and sum the micro-batch losses. It is a number or a 0-d
  tensor, taken as given. ``token-sum`` has no normaliser and ignores it.
"""

from __future__ import annotations

import torch
from torch import Tensor

from rl_core.algorithms.masked import (
    bool_mask,
    check_same_shape,
    mask_weights,
    zero_masked,
)

LOSS_AGG_MODES: tuple[str, ...] = (
    "token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
    "token-sum",
)


def check_loss_agg_mode(mode: str) -> None:
    """Raise ``ValueError`` naming the allowed values unless ``mode`` is one of them."""
    if mode not in LOSS_AGG_MODES:
        allowed = ", ".join(repr(m) for m in LOSS_AGG_MODES)
        raise ValueError(f"loss_agg_mode={mode!r} is not supported; use one of {allowed}")


def _divide(num: Tensor, den: Tensor | float) -> Tensor:
    den = torch.as_tensor(den, dtype=num.dtype, device=num.device)
    ok = den > 0
    return torch.where(ok, num / torch.where(ok, den, torch.ones_like(den)), torch.zeros_like(num))


def agg_loss(
    loss_mat: Tensor,
    mask: Tensor,
    mode: str = "token-mean",
    *,
    norm_length: int | None = None,
    denominator: Tensor | float | None = None,
) -> Tensor:
    """Aggregate a token-level loss matrix into a scalar.

    Args:
        loss_mat: ``[B, T]`` per-token losses (any float dtype; computed in fp32).
        mask: ``[B, T]`` response mask; bool/int 0-1, or float weights.
        mode: one of :data:`LOSS_AGG_MODES` (table in the module docstring).
        norm_length: the constant for ``seq-mean-token-sum-norm`` (default ``T``).
        denominator: overrides the local token / sequence count (see module doc).

    Returns:
        0-d float32 tensor (differentiable w.r.t. ``loss_mat``).
    """
    check_loss_agg_mode(mode)
    check_same_shape("loss_mat", loss_mat, mask)
    if loss_mat.dim() != 2:
        raise ValueError(f"loss_mat must be [B, T], got shape {tuple(loss_mat.shape)}")
    w = mask_weights(mask)
    weighted = zero_masked(loss_mat, mask) * w  # [B, T]; NaN at masked positions cannot leak
    if mode == "token-mean":
        return _divide(weighted.sum(), w.sum() if denominator is None else denominator)
    if mode == "token-sum":
        return weighted.sum()

    seq_valid = bool_mask(mask).any(dim=-1)  # [B]
    n_seq = seq_valid.sum().to(torch.float32) if denominator is None else denominator
    token_sum = weighted.sum(dim=-1)  # [B]
    if mode == "seq-mean-token-sum":
        per_seq = token_sum
    elif mode == "seq-mean-token-mean":
        per_seq = _divide(token_sum, w.sum(dim=-1))
    else:  # seq-mean-token-sum-norm
        length = loss_mat.shape[-1] if norm_length is None else norm_length
        if length <= 0:
            raise ValueError(f"norm_length must be positive, got {length}")
        per_seq = token_sum / float(length)
    return _divide(per_seq.sum(), n_seq)
