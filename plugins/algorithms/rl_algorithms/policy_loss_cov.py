"""Covariance-based policy losses (Cui et al. 2025, "The Entropy Mechanism of Reinforcement
Learning for Reasoning Language Models", arXiv:2505.22617): ``clip_cov`` and ``kl_cov``.

Both find the tokens whose centred ``advantage x log-prob`` product (their contribution to
the covariance that drives entropy collapse) is large, and damp only those: Clip-Cov drops
their gradient, KL-Cov adds a ``|log r|`` penalty. Knobs in ``options`` (verl's
``actor.policy_loss.*``): ``clip_cov_ratio`` (0.0002), ``clip_cov_lb`` (1.0), ``clip_cov_ub``
(5.0), ``kl_cov_ratio`` (0.0002), ``ppo_kl_coef`` (0.1). Signature and conventions:
:mod:`rl_core.algorithms.policy_loss`.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch
from rl_core.algorithms.masked import masked_mean, zero_masked
from rl_core.algorithms.policy_loss import clip_range, finish_loss, prepare_loss
from torch import Tensor


def _opt(options: Mapping[str, Any] | None, key: str, default: float) -> float:
    return float(default if options is None or options.get(key) is None else options[key])


def clip_cov(
    *, old_log_prob: Tensor, log_prob: Tensor, advantages: Tensor, response_mask: Tensor,
    loss_agg_mode: str = "token-mean", clip_ratio: float = 0.2, clip_ratio_low: float | None = None,
    clip_ratio_high: float | None = None, clip_ratio_c: float = 3.0, options: Mapping[str, Any] | None = None,
    rollout_is_weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Clip-Cov: PPO's clipped surrogate, with the gradient of up to
    ``max(1, int(clip_cov_ratio * #valid tokens))`` tokens set to 0, drawn at random
    (``torch.randperm``, the default generator, as verl) among the not-already-clipped
    tokens whose centred covariance lies in ``(clip_cov_lb, clip_cov_ub)``.
    Metrics: ``clipfrac`` (fraction of tokens whose gradient was dropped), ``ppo_kl``.
    The log-ratio is not clamped (as verl)."""
    ratio_k = _opt(options, "clip_cov_ratio", 0.0002)
    if not ratio_k > 0:
        raise ValueError(f"clip_cov needs policy_loss_options.clip_cov_ratio > 0, got {ratio_k}")
    lb, ub = _opt(options, "clip_cov_lb", 1.0), _opt(options, "clip_cov_ub", 5.0)
    low, high = clip_range(clip_ratio, clip_ratio_low, clip_ratio_high)
    mask, _, adv = prepare_loss(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode)
    lp = zero_masked(log_prob.float(), mask)
    log_ratio = lp - zero_masked(old_log_prob.detach().float(), mask)
    ratio = torch.exp(log_ratio)
    pg1 = -adv * ratio
    pg2 = -adv * ratio.clamp(1.0 - low, 1.0 + high)
    clipped_by_ppo = (pg2 > pg1) & mask
    with torch.no_grad():
        cov = (adv - masked_mean(adv, mask)) * (lp - masked_mean(lp, mask))
        candidates = torch.nonzero((cov < ub) & (cov > lb) & mask & ~clipped_by_ppo)
        clip_num = max(int(ratio_k * int(mask.sum())), 1)
        if len(candidates) > 0:
            perm = torch.randperm(len(candidates))
            candidates = candidates[perm[: min(clip_num, len(candidates))]]
        keep = torch.ones_like(adv)
        keep[candidates[:, 0], candidates[:, 1]] = 0.0
    loss = finish_loss(torch.maximum(pg1, pg2) * keep, mask, loss_agg_mode, rollout_is_weights, options)
    return loss, {
        "clipfrac": masked_mean((keep == 0).float(), mask).detach(),
        "ppo_kl": masked_mean(-log_ratio, mask).detach(),
    }


def kl_cov(
    *, old_log_prob: Tensor, log_prob: Tensor, advantages: Tensor, response_mask: Tensor,
    loss_agg_mode: str = "token-mean", clip_ratio: float = 0.2, clip_ratio_low: float | None = None,
    clip_ratio_high: float | None = None, clip_ratio_c: float = 3.0, options: Mapping[str, Any] | None = None,
    rollout_is_weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """KL-Cov: the unclipped surrogate ``-A r``, plus ``ppo_kl_coef * |log r|`` on the
    ``max(1, int(kl_cov_ratio * #valid tokens))`` tokens with the largest centred covariance.
    Metrics: ``ppo_kl`` is the mean ``|log r|`` here (as verl). The log-ratio is not clamped."""
    ratio_k = _opt(options, "kl_cov_ratio", 0.0002)
    if not ratio_k > 0:
        raise ValueError(f"kl_cov needs policy_loss_options.kl_cov_ratio > 0, got {ratio_k}")
    coef = _opt(options, "ppo_kl_coef", 0.1)
    mask, _, adv = prepare_loss(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode)
    lp = zero_masked(log_prob.float(), mask)
    log_ratio = lp - zero_masked(old_log_prob.detach().float(), mask)
    ratio = torch.exp(log_ratio)
    pg1 = -adv * ratio
    pg_kl = pg1 + coef * log_ratio.abs()
    selected = torch.zeros_like(mask)
    n_valid = int(mask.sum())
    if n_valid > 0:
        with torch.no_grad():
            flat_valid = torch.nonzero(mask.reshape(-1), as_tuple=True)[0]
            a, x = adv[mask], lp[mask]
            cov = (a - a.mean()) * (x - x.mean())
            top = torch.topk(cov, max(1, int(n_valid * ratio_k)), largest=True).indices
            selected.view(-1)[flat_valid[top]] = True
    loss = finish_loss(torch.where(selected, pg_kl, pg1), mask, loss_agg_mode, rollout_is_weights, options)
    return loss, {"ppo_kl": masked_mean(log_ratio.abs(), mask).detach()}
