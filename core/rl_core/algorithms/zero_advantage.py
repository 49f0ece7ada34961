"""Rows of an actor mini-batch that carry no gradient, so a backend can leave them out of the update.

With a group estimator (GRPO, RLOO, ...) a group whose responses all got the same reward has an
advantage of exactly 0 on every token. For a policy loss of the form ``A * f(ratio)`` such a row
adds exactly 0 to the loss and to the gradient; its only effect is through the loss normaliser
(the token or sequence count of ``loss_agg_mode``), which the backend computes over the whole
mini-batch before dropping anything. Leaving the row out of the forward / backward therefore gives
the same update (up to float rounding of the sums) for less compute. On a task the model mostly
fails or mostly solves, most groups are such rows (e.g. early in the CPU quickstart, where 9 in 10
answers are wrong, two thirds of the groups of four).

Not skippable when another term depends on the row: an entropy bonus (``entropy_coeff != 0``),
the KL loss (``use_kl_loss``), or a policy loss whose card does not declare ``skips_zero_advantage``
(:class:`rl_core.cards.PolicyLossCard`: a third-party loss says it there). The plan decides the last
one once: its ``actor.skip_zero_advantage_rows`` is false for such a loss (:mod:`rl_core.plan.resolver`).
The logged ``actor/entropy``, ``actor/pg_clipfrac`` and ``actor/ppo_kl`` then describe the rows
that were trained on.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from rl_core.algorithms.masked import bool_mask


def can_skip_zero_advantage_rows(cfg: Any) -> bool:
    """Whether the actor config (``rl_core.config.schema.ActorConfig``, the plan's) allows dropping zero-advantage rows."""
    return bool(getattr(cfg, "skip_zero_advantage_rows", False)) and cfg.entropy_coeff == 0 and not cfg.use_kl_loss


def rows_with_signal(advantages: Tensor, response_mask: Tensor) -> Tensor:
    """Indices (``[k]``, int64, ascending) of the rows with a non-zero advantage on some valid token.

    ``advantages``, ``response_mask``: ``[B, T]``. Masked positions are not read (NaN there is fine).
    """
    if advantages.shape != response_mask.shape or advantages.dim() != 2:
        raise ValueError(f"advantages {tuple(advantages.shape)} and response_mask {tuple(response_mask.shape)} must both be [B, T]")
    live = bool_mask(response_mask) & (advantages != 0)
    return torch.nonzero(live.any(dim=-1), as_tuple=False).flatten()
