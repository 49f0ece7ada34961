"""Rows of an actor mini-batch with an all-zero advantage carry no gradient for an ``A * f(ratio)`` loss, so a backend
may leave them out of the update (``actor.skip_zero_advantage_rows``; docs/algorithms.md says when it may not).
The loss normaliser is computed over the whole mini-batch first, so the update is the same."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from rl_core.algorithms.masked import bool_mask


def can_skip_zero_advantage_rows(cfg: Any) -> bool:
    """Whether the actor config (``rl_core.config.schema.ActorConfig``, the plan's) allows dropping zero-advantage rows."""
    return bool(getattr(cfg, "skip_zero_advantage_rows", False)) and cfg.entropy_coeff == 0 and not cfg.use_kl_loss


def rows_with_signal(advantages: Tensor, response_mask: Tensor) -> Tensor:
    """Ascending int64 indices of the rows with a non-zero advantage on some valid token (masked positions not read)."""
    if advantages.shape != response_mask.shape or advantages.dim() != 2:
        raise ValueError(f"advantages {tuple(advantages.shape)} and response_mask {tuple(response_mask.shape)} must both be [B, T]")
    live = bool_mask(response_mask) & (advantages != 0)
    return torch.nonzero(live.any(dim=-1), as_tuple=False).flatten()
