"""Policy-gradient losses: one keyword-only signature for all of them.

Every loss is called as::

    loss, metrics = fn(
        old_log_prob=...,   # Tensor[B, T] log pi_old(a_t | s_t) (the behaviour policy; no grad)
        log_prob=...,       # Tensor[B, T] log pi_theta(a_t | s_t) (with grad)
        advantages=...,     # Tensor[B, T]
        response_mask=...,  # Tensor[B, T]
        loss_agg_mode="token-mean",   # see rl_core.algorithms.aggregation
        clip_ratio=0.2, clip_ratio_low=None, clip_ratio_high=None,   # eps; low/high default to clip_ratio
        clip_ratio_c=3.0,   # dual-clip constant (> 1)
        options=None,       # Mapping of loss-specific knobs
        rollout_is_weights=None,  # Tensor[B, T] detached rollout-correction weights
    )

``loss`` is a 0-d float32 tensor to minimise. ``metrics`` maps names to
**detached 0-d float32 tensors** (no host sync inside the loss; call
``float()`` when logging):

- ``clipfrac``: fraction of valid tokens where the clipped term was the one used;
- ``ppo_kl``: mean over valid tokens of ``log pi_old - log pi_theta``, the k1
  estimate of KL(pi_old || pi_theta) (Schulman, "Approximating KL Divergence", 2020);
- ``clipfrac_lower`` (``dual_clip`` only): fraction of valid tokens with
  negative advantage where the dual-clip bound ``-A * clip_ratio_c`` was used.

Inputs may be bf16; arithmetic is fp32. Masked positions are never read
(NaN there is fine). The log-ratio is clamped to ``[-20, 20]`` before
``exp`` so a stale token cannot overflow (verl does the same).

``rollout_is_weights`` (:mod:`rl_core.algorithms.rollout_correction`) multiply
the per-token loss before aggregation, as in verl. ``options["norm_length"]``
is the constant of ``seq-mean-token-sum-norm`` (verl's
``actor.loss_scale_factor``; default the padded width).

Names: ``vanilla`` is verl's default, PPO with the dual clip on negative
advantages (:func:`dual_clip`); ``ppo_clip`` is PPO without it (Schulman et
al. 2017 as written). The other losses (gspo, gpg, dro, cispo, sapo, geo_mean,
dppo_tv, dppo_kl, clip_cov, kl_cov) come with the rl-algorithms package
(``plugins/algorithms``), on :func:`clip_range`, :func:`prepare_loss`,
:func:`clipped_surrogate` and :func:`finish_loss`.
"""

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
    """PPO clipped surrogate (Schulman et al. 2017, "Proximal Policy Optimization Algorithms", eq. 7).

    ``r_t = exp(log_prob - old_log_prob)``; per token
    ``L_t = max(-A_t r_t, -A_t clip(r_t, 1 - eps_low, 1 + eps_high))``, then
    aggregated by ``loss_agg_mode``.

    Separate ``clip_ratio_low`` / ``clip_ratio_high`` give DAPO's clip-higher
    (Yu et al. 2025, "DAPO: An Open-Source LLM Reinforcement Learning System
    at Scale": eps_low=0.2, eps_high=0.28); both default to ``clip_ratio``.
    ``clip_ratio_c`` is ignored (see :func:`dual_clip`; verl's default
    ``vanilla`` is the dual clip, which bounds the loss of a negative-advantage
    token whose ratio blew up).

    Shapes: all inputs ``[B, T]`` -> (0-d loss, metrics ``clipfrac``, ``ppo_kl``).

    Departures: PPO maximises the objective; this returns its negation to
    minimise. The paper's value-loss and entropy terms are separate
    (:mod:`rl_core.algorithms.actor_loss`).
    """
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
    """Dual-clip PPO (Ye et al. 2020, "Mastering Complex Control in MOBA Games with
    Deep Reinforcement Learning", section 3.3).

    As :func:`ppo_clip`, plus, for tokens with ``A_t < 0``, the loss is capped at
    ``-A_t * c`` (``c = clip_ratio_c > 1``): ``L_t = min(L_t^ppo, -A_t c)``.
    When the ratio is huge and the advantage negative, PPO's loss grows without
    bound; the cap bounds that token's gradient to 0. Registered as ``vanilla``
    too (verl's name and default).

    Shapes: all inputs ``[B, T]`` -> (0-d loss, metrics ``clipfrac``,
    ``clipfrac_lower``, ``ppo_kl``).
    """
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
