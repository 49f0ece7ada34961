"""Rollout correction (``algorithm.rollout_correction``, verl's): importance weights and rejection masks for the gap
between the rollout engine's policy and the trainer's, ``log rho = log pi_old - log pi_rollout``. The method, verl
parity and the metrics we add or leave out: docs/algorithms.md; the keys: docs/config.md."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from rl_core.algorithms.masked import masked_mean, masked_sum

from rl_rollout_correction.options import IS_LEVELS, correction_on, in_update, parse_is_threshold, parse_rs, update_correction  # noqa: F401 - used here / re-exported

SAFETY_BOUND = 20.0


def _masked_max(x: Tensor, mask: Tensor) -> float:
    return float(x.masked_fill(~mask, float("-inf")).max())


def _masked_min(x: Tensor, mask: Tensor) -> float:
    return float(x.masked_fill(~mask, float("inf")).min())


def _raw_weights(log_ratio: Tensor, mask: Tensor, level: str, upper: float, lower: float | None) -> tuple[Tensor, Tensor, Tensor]:
    """``(the log-ratio the metrics read, raw ratios, weights)`` (``is_weights`` without its metrics)."""
    log_ratio = torch.where(mask, log_ratio.float(), torch.zeros_like(log_ratio, dtype=torch.float32))
    if level == "token":
        metric_log_ratio = log_ratio
        raw = torch.exp(log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND))
    else:
        metric_log_ratio = log_ratio.sum(dim=-1, keepdim=True)
        raw = torch.exp(metric_log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND)).expand_as(log_ratio)
    raw = raw * mask.float()
    if lower is None:
        weights = raw.clamp(max=upper)
    else:
        weights = torch.where((raw >= lower) & (raw <= upper), raw, torch.zeros_like(raw))
    return metric_log_ratio, raw, weights


def row_weights(old_log_prob: Tensor, rollout_log_prob: Tensor, mask: Tensor, rc: Any) -> Tensor:
    """The weights :func:`is_weights` gives (detached, no metrics, no host sync), for :func:`in_update` corrections."""
    upper, lower = parse_is_threshold(rc.rollout_is_threshold)
    return _raw_weights((old_log_prob.detach().float() - rollout_log_prob.float()), mask.bool(), rc.rollout_is, upper, lower)[2]


def is_weights(
    log_ratio: Tensor, mask: Tensor, level: str = "token", threshold: float | str = 2.0, batch_normalize: bool = False
) -> tuple[Tensor, dict[str, float]]:
    """Importance weights ``[B, T]`` (0 on masked tokens, detached) of ``log_ratio = log pi_old - log pi_rollout`` and their
    metrics (no prefix): ``rollout_is_mean/max/min/std``, ``..._ratio_fraction_high/low``, ``..._eff_sample_size``,
    ``rollout_is_seq_mean/std/max/min/max_deviation/fraction_high/fraction_low``, ``..._oob_ratio`` (mask mode),
    ``rollout_is_batch_norm_factor``.
    """
    if level not in IS_LEVELS:
        raise ValueError(f"algorithm.rollout_correction.rollout_is={level!r}: use 'token', 'sequence' or null")
    upper, lower = parse_is_threshold(threshold)
    metric_log_ratio, raw, weights = _raw_weights(log_ratio, mask, level, upper, lower)
    low_bound = 1.0 / upper if lower is None else lower
    m: dict[str, float] = {}
    if level == "sequence":
        m["rollout_is_max"] = math.exp(min(float(metric_log_ratio.max()), SAFETY_BOUND))
        m["rollout_is_min"] = math.exp(float(metric_log_ratio.min()))
        m["rollout_is_mean"] = float(masked_mean(weights, mask))
        m["rollout_is_ratio_fraction_high"] = float((metric_log_ratio > math.log(upper)).float().mean())
        m["rollout_is_ratio_fraction_low"] = float((metric_log_ratio < math.log(low_bound)).float().mean())
    else:
        m["rollout_is_mean"] = float(masked_mean(weights, mask))
        m["rollout_is_ratio_fraction_high"] = float(masked_mean((raw > upper).float(), mask))
        m["rollout_is_ratio_fraction_low"] = float(masked_mean((raw < low_bound).float(), mask))
        m["rollout_is_max"] = _masked_max(weights, mask)
        m["rollout_is_min"] = _masked_min(weights, mask)
    bounded = weights.clamp(min=0.0, max=upper)
    mean_b = masked_mean(bounded, mask)
    if int(mask.sum()) > 1:
        m["rollout_is_std"] = math.sqrt(max(float(masked_mean(bounded.square(), mask) - mean_b.square()), 0.0))
    else:
        m["rollout_is_std"] = 0.0
    m["rollout_is_eff_sample_size"] = 1.0 / float(masked_mean((bounded / (mean_b + 1e-8)).square(), mask))
    seq_mean = masked_mean(weights, mask, dim=-1)
    m["rollout_is_seq_mean"] = float(seq_mean.mean())
    m["rollout_is_seq_std"] = float(seq_mean.std()) if seq_mean.numel() > 1 else 0.0
    m["rollout_is_seq_max"] = float(seq_mean.max())
    m["rollout_is_seq_min"] = float(seq_mean.min())
    m["rollout_is_seq_max_deviation"] = float((seq_mean - 1.0).abs().max())
    raw_seq_mean = masked_mean(raw, mask, dim=-1)
    m["rollout_is_seq_fraction_high"] = float((raw_seq_mean > upper).float().mean())
    m["rollout_is_seq_fraction_low"] = float((raw_seq_mean < low_bound).float().mean())
    if lower is not None:
        m["rollout_is_oob_ratio"] = float(masked_mean(((raw < lower) | (raw > upper)).float(), mask))
    weights = weights.detach()
    if batch_normalize:
        if level == "token":
            mean_w = masked_mean(weights, mask)
        else:
            seq_valid = mask.any(dim=-1).float()
            mean_w = (masked_mean(weights, mask, dim=-1) * seq_valid).sum() / seq_valid.sum().clamp_min(1e-8)
        if float(mean_w) > 1e-8:
            weights = weights / mean_w
            m["rollout_is_batch_norm_factor"] = float(mean_w)
        else:
            m["rollout_is_batch_norm_factor"] = 1.0
    return weights, m


def rejection_mask(log_ratio: Tensor, mask: Tensor, options: str, threshold: float | str | None) -> tuple[Tensor, dict[str, float]]:
    """The response mask with rejected tokens / responses removed (bool ``[B, T]``) and metrics:
    ``rollout_rs_masked_fraction``, ``rollout_rs_seq_masked_fraction`` and, per criterion,
    ``rollout_rs_<opt>_masked_fraction`` / ``_seq_masked_fraction``."""
    specs = parse_rs(options, threshold)
    lr = log_ratio.float().clamp(-SAFETY_BOUND, SAFETY_BOUND)
    token = {"k1": -lr, "k2": 0.5 * lr.square(), "k3": torch.exp(lr) - 1.0 - lr}
    seq_valid = mask.any(dim=-1)
    keep_all = torch.ones_like(mask)
    m: dict[str, float] = {}
    for name, (lower, upper) in specs.items():
        level, k = name.rsplit("_", 1)
        stat = token[k]
        if level == "seq_sum":
            stat = masked_sum(stat, mask, dim=-1).unsqueeze(-1)
        elif level == "seq_mean":
            stat = masked_mean(stat, mask, dim=-1).unsqueeze(-1)
        elif level == "seq_max":
            mx = stat.masked_fill(~mask, float("-inf")).max(dim=-1, keepdim=True).values
            stat = torch.where(torch.isinf(mx), torch.zeros_like(mx), mx)
        if lower is not None:  # k1: bounds on -log rho, given as ratios
            keep = (stat >= math.log(lower)) & (stat <= math.log(upper))
        else:
            keep = stat <= upper
        keep = keep.expand_as(mask)
        keep_all = keep_all & keep
        m[f"rollout_rs_{name}_masked_fraction"] = float(masked_mean((~keep).float(), mask))
        seq_keep = ~((~keep) & mask).any(dim=-1)
        m[f"rollout_rs_{name}_seq_masked_fraction"] = (
            float(((~seq_keep) & seq_valid).float().sum() / seq_valid.float().sum()) if seq_valid.any() else 0.0
        )
    m["rollout_rs_masked_fraction"] = float(masked_mean((~keep_all).float(), mask))
    m["rollout_rs_seq_masked_fraction"] = float(((~keep_all) & mask).any(dim=-1).float().mean())
    return mask & keep_all, m


def offpolicy_metrics(old_log_prob: Tensor, rollout_log_prob: Tensor, mask: Tensor) -> dict[str, float]:
    """verl's diagnostics of the gap (no prefix): ``kl``, ``k3_kl``, ``training_ppl`` / ``rollout_ppl`` (+ ``_log_ppl``),
    ``log_ppl_diff`` (+ ``abs``, ``max``, ``min``), ``ppl_ratio``, ``chi2_token``, ``chi2_seq``; ours:
    ``log_prob_abs_diff_mean`` / ``_max``."""
    old, roll = old_log_prob.float(), rollout_log_prob.float()
    m: dict[str, float] = {}
    mean_old = masked_mean(old, mask, dim=-1)
    mean_roll = masked_mean(roll, mask, dim=-1)
    m["training_ppl"] = float(torch.exp(-mean_old).mean())
    m["training_log_ppl"] = float((-mean_old).mean())
    m["kl"] = float(masked_mean(roll - old, mask))
    log_ratio = old - roll
    m["k3_kl"] = float(masked_mean(torch.exp(log_ratio) - log_ratio - 1, mask))
    m["rollout_ppl"] = float(torch.exp(-mean_roll).mean())
    m["rollout_log_ppl"] = float((-mean_roll).mean())
    diff = mean_roll - mean_old
    m["log_ppl_diff"] = float(diff.mean())
    m["log_ppl_abs_diff"] = float(diff.abs().mean())
    m["log_ppl_diff_max"] = float(diff.max())
    m["log_ppl_diff_min"] = float(diff.min())
    m["ppl_ratio"] = float(torch.exp(diff).mean())
    safe = log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND)
    m["chi2_token"] = float(masked_mean(torch.exp(safe).square(), mask) - 1.0)
    seq_sum = masked_sum(log_ratio, mask, dim=-1).clamp(-SAFETY_BOUND, SAFETY_BOUND)
    m["chi2_seq"] = float(torch.exp(2.0 * seq_sum).mean() - 1.0)
    absdiff = (roll - old).abs()
    m["log_prob_abs_diff_mean"] = float(masked_mean(absdiff, mask))
    m["log_prob_abs_diff_max"] = _masked_max(absdiff, mask)
    return m


def rollout_correction(
    old_log_prob: Tensor,
    rollout_log_prob: Tensor,
    response_mask: Tensor,
    cfg: Any,
) -> tuple[Tensor | None, Tensor, dict[str, float]]:
    """Weights (None when ``cfg.rollout_is`` is None), the response mask after rejection (its dtype kept) and
    ``rollout_corr/`` metrics; ``cfg``: :class:`rl_rollout_correction.config.RolloutCorrectionConfig`; shapes ``[B, T]``."""
    for name, x in (("old_log_prob", old_log_prob), ("rollout_log_prob", rollout_log_prob)):
        if tuple(x.shape) != tuple(response_mask.shape):
            raise ValueError(f"{name} has shape {tuple(x.shape)} but response_mask has {tuple(response_mask.shape)}")
    mask = response_mask.bool()
    if not mask.any():
        raise ValueError("rollout correction needs at least one valid response token")
    log_ratio = old_log_prob.float() - rollout_log_prob.float()
    metrics: dict[str, float] = {}
    weights = None
    if cfg.rollout_is is not None:
        weights, wm = is_weights(log_ratio, mask, cfg.rollout_is, cfg.rollout_is_threshold, cfg.rollout_is_batch_normalize)
        metrics.update(wm)
    new_mask = response_mask
    if cfg.rollout_rs is not None:
        kept, rm = rejection_mask(log_ratio, mask, cfg.rollout_rs, cfg.rollout_rs_threshold)
        new_mask = kept.to(response_mask.dtype)
        metrics.update(rm)
    metrics.update(offpolicy_metrics(old_log_prob, rollout_log_prob, mask))
    return weights, new_mask, {f"rollout_corr/{k}": v for k, v in metrics.items()}
