"""Entropy and log-probabilities from logits (numerically stable)."""

from __future__ import annotations

import torch
from torch import Tensor


def _rows(logits: Tensor, chunk_size: int | None):
    flat = logits.reshape(-1, logits.shape[-1])
    if flat.shape[0] == 0:
        yield flat
        return
    step = flat.shape[0] if not chunk_size or chunk_size <= 0 else chunk_size
    for start in range(0, flat.shape[0], step):
        yield flat[start : start + step]


def entropy_from_logits(logits: Tensor, *, chunk_size: int | None = None) -> Tensor:
    """Entropy of ``softmax(logits)`` over the last dimension, ``[..., V] -> [...]`` float32, stable for large logits;
    ``-inf`` logits contribute 0. ``chunk_size`` bounds the float32 copy to that many rows at a time."""
    if logits.dim() == 0:
        raise ValueError("logits must have a vocabulary dimension [..., V]")
    out = []
    for z in _rows(logits, chunk_size):
        z = z.float()
        # Entropy is shift-invariant; shifting by the row max keeps both terms below small,
        # so lse - sum(p * z) does not cancel catastrophically for large logits.
        top = z.detach().amax(dim=-1, keepdim=True)
        z = z - torch.where(torch.isfinite(top), top, torch.zeros_like(top))
        lse = torch.logsumexp(z, dim=-1, keepdim=True)
        p = torch.exp(z - lse)
        # p * z is 0 * -inf = nan for -inf logits; those entries have p == 0 exactly.
        pz = torch.where(p > 0, p * z, torch.zeros_like(z))
        out.append(lse.squeeze(-1) - pz.sum(dim=-1))
    return torch.cat(out).reshape(logits.shape[:-1])


def logprobs_from_logits(logits: Tensor, labels: Tensor, *, chunk_size: int | None = None) -> Tensor:
    """``log softmax(logits)[label]`` per position: logits ``[..., V]``, labels ``[...]`` -> ``[...]`` float32."""
    if tuple(labels.shape) != tuple(logits.shape[:-1]):
        raise ValueError(f"labels {tuple(labels.shape)} must match logits without the vocab dim {tuple(logits.shape[:-1])}")
    flat_labels = labels.reshape(-1)
    out, start = [], 0
    for z in _rows(logits, chunk_size):
        lab = flat_labels[start : start + z.shape[0]].unsqueeze(-1)
        z = z.float()
        out.append(z.gather(-1, lab).squeeze(-1) - torch.logsumexp(z, dim=-1))
        start += z.shape[0]
    return torch.cat(out).reshape(labels.shape)
