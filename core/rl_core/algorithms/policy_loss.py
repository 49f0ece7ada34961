"""Policy-gradient losses: one keyword-only signature for all of them (docs/algorithms.md: arguments, metrics, fp32
arithmetic, the log-ratio clamp). Core has ``ppo_clip`` and ``dual_clip`` (= verl's ``vanilla``); rl-algorithms'
losses build on :func:`clip_range`, :func:`prepare_loss`, :func:`clipped_surrogate` and :func:`finish_loss`."""

from __future__ import annotations

from typing import Any, Mapping

import torch
from torch import Tensor

from rl_core.algorithms.aggregation import agg_loss, check_loss_agg_mode
from rl_core.algorithms.masked import (
    bool_mask,
    check_same_shape,
    masked_mean,
    zero_masked,
)

LOG_RATIO_CLAMP = 20.0


def clip_range(clip_ratio: float, low: float | None, high: float | None) -> tuple[float, float]:
    low = clip_ratio if low is None else low
    high = clip_ratio if high is None else high
    if low < 0 or high < 0:
        raise ValueError(f"clip ratios must be >= 0, got clip_ratio_low={low}, clip_ratio_high={high}")
    return float(low), float(high)


def prepare_loss(old_log_prob: Tensor, log_prob: Tensor, advantages: Tensor, response_mask: Tensor, mode: str):
    check_loss_agg_mode(mode)
    if response_mask.dim() != 2:
        raise ValueError(f"response_mask must be [B, T], got shape {tuple(response_mask.shape)}")
    for name, x in (("old_log_prob", old_log_prob), ("log_prob", log_prob), ("advantages", advantages)):
        check_same_shape(name, x, response_mask)
    mask = bool_mask(response_mask)
    log_ratio = zero_masked(log_prob.float() - old_log_prob.float(), mask).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    adv = zero_masked(advantages.detach(), mask).float()
    return mask, log_ratio, adv


def finish_loss(
    loss_mat: Tensor,
    mask: Tensor,
    mode: str,
    rollout_is_weights: Tensor | None,
    options: Mapping[str, Any] | None,
) -> Tensor:
    """Multiply by the rollout IS weights (if any), then aggregate with ``mode``."""
    if rollout_is_weights is not None:
        check_same_shape("rollout_is_weights", rollout_is_weights, mask)
        loss_mat = loss_mat * zero_masked(rollout_is_weights.detach(), mask)
    norm_length = None if options is None else options.get("norm_length")
    return agg_loss(loss_mat, mask, mode, norm_length=norm_length)


def clipped_surrogate(ratio: Tensor, adv: Tensor, low: float, high: float) -> tuple[Tensor, Tensor]:
    """PPO's pessimistic surrogate as a loss: ``max(-A r, -A clip(r, 1-low, 1+high))`` and the clip flag."""
    unclipped = -adv * ratio
    clipped = -adv * ratio.clamp(1.0 - low, 1.0 + high)
    return torch.maximum(unclipped, clipped), clipped > unclipped


def ppo_clip(
    *,
    old_log_prob: Tensor,
    log_prob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    loss_agg_mode: str = "token-mean",
    clip_ratio: float = 0.2,
    clip_ratio_low: float | None = None,
    clip_ratio_high: float | None = None,
    clip_ratio_c: float = 3.0,
    options: Mapping[str, Any] | None = None,
    rollout_is_weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO clipped surrogate (Schulman et al. 2017, eq. 7), negated to minimise; separate low / high ratios are DAPO's
    clip-higher. ``clip_ratio_c`` is ignored. Metrics ``clipfrac``, ``ppo_kl``."""
    low, high = clip_range(clip_ratio, clip_ratio_low, clip_ratio_high)
    mask, log_ratio, adv = prepare_loss(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode)
    loss_mat, was_clipped = clipped_surrogate(torch.exp(log_ratio), adv, low, high)
    loss = finish_loss(loss_mat, mask, loss_agg_mode, rollout_is_weights, options)
    metrics = {
        "clipfrac": masked_mean(was_clipped.float(), mask).detach(),
        "ppo_kl": masked_mean(-log_ratio, mask).detach(),
    }
    return loss, metrics


def dual_clip(
    *,
    old_log_prob: Tensor,
    log_prob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    loss_agg_mode: str = "token-mean",
    clip_ratio: float = 0.2,
    clip_ratio_low: float | None = None,
    clip_ratio_high: float | None = None,
    clip_ratio_c: float = 3.0,
    options: Mapping[str, Any] | None = None,
    rollout_is_weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Dual-clip PPO (Ye et al. 2020, section 3.3; verl's ``vanilla``): as :func:`ppo_clip`, the loss of ``A_t < 0``
    tokens capped at ``-A_t * clip_ratio_c``. Metrics ``clipfrac``, ``clipfrac_lower``, ``ppo_kl``."""
    if not clip_ratio_c > 1.0:
        raise ValueError(f"dual_clip needs clip_ratio_c > 1 (the paper uses 3), got {clip_ratio_c}")
    low, high = clip_range(clip_ratio, clip_ratio_low, clip_ratio_high)
    mask, log_ratio, adv = prepare_loss(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode)
    ppo_mat, was_clipped = clipped_surrogate(torch.exp(log_ratio), adv, low, high)
    cap = -adv * clip_ratio_c
    negative = adv < 0
    capped = negative & (ppo_mat > cap)
    loss_mat = torch.where(negative, torch.minimum(ppo_mat, cap), ppo_mat)
    loss = finish_loss(loss_mat, mask, loss_agg_mode, rollout_is_weights, options)
    metrics = {
        "clipfrac": masked_mean(was_clipped.float(), mask).detach(),
        "clipfrac_lower": masked_mean(capped.float(), mask).detach(),
        "ppo_kl": masked_mean(-log_ratio, mask).detach(),
    }
    return loss, metrics
