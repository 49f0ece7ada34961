"""Masked reductions: a position whose mask is 0 is absent, replaced by 0 with ``torch.where`` before any arithmetic,
so NaN / inf padding never leaks (``x * mask`` would: ``nan * 0`` is ``nan``). ``mask`` (``x``'s shape) may be bool,
integer or float; :func:`masked_sum` / :func:`masked_mean` read float weights."""

from __future__ import annotations

import torch
from torch import Tensor


def check_same_shape(name: str, x: Tensor, mask: Tensor) -> None:
    """Raise ``ValueError`` unless ``x`` has ``mask``'s shape (names the argument)."""
    if tuple(x.shape) != tuple(mask.shape):
        raise ValueError(f"{name} has shape {tuple(x.shape)} but response_mask has {tuple(mask.shape)}; they must match")


def bool_mask(mask: Tensor) -> Tensor:
    """``mask != 0`` as a bool tensor (same shape)."""
    return mask if mask.dtype == torch.bool else mask != 0


def mask_weights(mask: Tensor) -> Tensor:
    """The mask as float32 weights (bool / int -> 0.0 / 1.0)."""
    return mask.to(torch.float32)


def zero_masked(x: Tensor, mask: Tensor) -> Tensor:
    """``x`` as float32 (at least), with masked positions set to exactly 0."""
    x = x if x.dtype in (torch.float32, torch.float64) else x.to(torch.float32)
    return torch.where(bool_mask(mask), x, torch.zeros((), dtype=x.dtype, device=x.device))


def safe_div(num: Tensor, den: Tensor | float) -> Tensor:
    """``num / den`` where ``den > 0``, else 0 (no NaN in the forward or backward pass); ``den`` in ``num``'s dtype."""
    den = torch.as_tensor(den, dtype=num.dtype, device=num.device)
    ok = den > 0
    return torch.where(ok, num / torch.where(ok, den, torch.ones_like(den)), torch.zeros_like(num))


def masked_sum(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Sum of ``x * mask`` over ``dim`` (all dims if None); masked NaN/inf ignored."""
    w = mask_weights(mask)
    v = zero_masked(x, mask) * w
    return v.sum() if dim is None else v.sum(dim=dim)


def masked_mean(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Weighted mean of ``x`` over ``dim`` (all dims if None); 0 where the mask is empty."""
    w = mask_weights(mask)
    den = w.sum() if dim is None else w.sum(dim=dim)
    return safe_div(masked_sum(x, mask, dim), den)


def masked_var(x: Tensor, mask: Tensor, unbiased: bool = True) -> Tensor:
    """Variance of the valid entries of ``x`` (0-d; mask read as 0/1); 0 when fewer than two are valid."""
    m = bool_mask(mask)
    mean = masked_mean(x, m)
    dev = zero_masked(x - mean, m)
    n = m.sum().to(torch.float32)
    den = n - 1 if unbiased else n
    return safe_div((dev * dev).sum(), den)


def masked_whiten(x: Tensor, mask: Tensor, eps: float = 1e-8, shift_mean: bool = True) -> Tensor:
    """``(x - mean) / sqrt(var + eps)`` over all valid entries of the batch, 0 at masked positions (``shift_mean=False``
    adds the mean back)."""
    m = bool_mask(mask)
    mean = masked_mean(x, m)
    var = masked_var(x, m)
    out = (zero_masked(x, m) - mean) * torch.rsqrt(var + eps)
    if not shift_mean:
        out = out + mean
    return zero_masked(out, m)
