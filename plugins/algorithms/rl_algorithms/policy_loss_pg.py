"""Policy losses beyond PPO's clipped ratio, with verl's names: gspo, gpg, dro, cispo, sapo,
geo_mean, dppo_tv, dppo_kl.

Same keyword-only signature, metrics and conventions as
:mod:`rl_core.algorithms.policy_loss`. Loss-specific knobs come in ``options``
(``actor.policy_loss_options``; verl's ``actor.policy_loss.*`` / ``actor.tau_*``
keys): ``dro_beta``, ``tau_pos`` (1.0), ``tau_neg`` (1.05).
"""

from __future__ import annotations

from typing import Any, Mapping

import torch
from rl_core.algorithms.masked import masked_mean, zero_masked
from rl_core.algorithms.policy_loss import clip_range, clipped_surrogate, finish_loss, prepare_loss
from torch import Tensor

GSPO_LOG_RATIO_MAX = 10.0  # the token log-ratio of gspo is clamped from above (as verl)


def _opt(options: Mapping[str, Any] | None, key: str, default: Any) -> Any:
    return default if options is None or options.get(key) is None else options[key]


def _log_prob(log_prob: Tensor, mask: Tensor) -> Tensor:
    return zero_masked(log_prob.float(), mask)


def gpg(
    *, old_log_prob: Tensor, log_prob: Tensor, advantages: Tensor, response_mask: Tensor,
    loss_agg_mode: str = "token-mean", clip_ratio: float = 0.2, clip_ratio_low: float | None = None,
    clip_ratio_high: float | None = None, clip_ratio_c: float = 3.0, options: Mapping[str, Any] | None = None,
    rollout_is_weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Group Policy Gradient (Chu et al. 2025): plain policy gradient ``L_t = -A_t log pi(y_t)``,
    no ratio and no clipping (pair with the ``gpg`` estimator). Shapes ``[B, T]`` -> 0-d.
    Metrics: ``ppo_kl`` (verl reports none for this loss)."""
    mask, log_ratio, adv = prepare_loss(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode)
    loss = finish_loss(-adv * _log_prob(log_prob, mask), mask, loss_agg_mode, rollout_is_weights, options)
    return loss, {"ppo_kl": masked_mean(-log_ratio, mask).detach()}


def dro(
    *, old_log_prob: Tensor, log_prob: Tensor, advantages: Tensor, response_mask: Tensor,
    loss_agg_mode: str = "token-mean", clip_ratio: float = 0.2, clip_ratio_low: float | None = None,
    clip_ratio_high: float | None = None, clip_ratio_c: float = 3.0, options: Mapping[str, Any] | None = None,
    rollout_is_weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Policy gradient with a quadratic penalty on the log-ratio (verl's ``dro``):
    ``L_t = -(A_t log pi(y_t) - beta/2 (log pi - log pi_old)^2)``, ``beta = options["dro_beta"] > 0``
    (required; verl's ``actor.policy_loss.dro_beta``). The log-ratio is not clamped (as verl)."""
    beta = _opt(options, "dro_beta", None)
    if beta is None or not float(beta) > 0:
        raise ValueError("policy loss 'dro' needs actor.policy_loss_options.dro_beta > 0 (verl: actor.policy_loss.dro_beta)")
    mask, _, adv = prepare_loss(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode)
    lp = _log_prob(log_prob, mask)
    log_ratio = lp - zero_masked(old_log_prob.detach().float(), mask)
    loss_mat = -(lp * adv - 0.5 * float(beta) * log_ratio.square())
    loss = finish_loss(loss_mat, mask, loss_agg_mode, rollout_is_weights, options)
    return loss, {"ppo_kl": masked_mean(-log_ratio, mask).detach()}


def cispo(
    *, old_log_prob: Tensor, log_prob: Tensor, advantages: Tensor, response_mask: Tensor,
    loss_agg_mode: str = "token-mean", clip_ratio: float = 0.2, clip_ratio_low: float | None = None,
    clip_ratio_high: float | None = None, clip_ratio_c: float = 3.0, options: Mapping[str, Any] | None = None,
    rollout_is_weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """CISPO (MiniMax 2025, "MiniMax-M1", arXiv:2506.13585): clip the importance weight,
    stop its gradient, and keep every token's gradient:
    ``L_t = -sg[clip(r_t, 1 - eps_low, 1 + eps_high)] A_t log pi(y_t)``.
    Metrics: ``clipfrac`` (tokens whose ratio was clipped), ``ppo_kl``."""
    low, high = clip_range(clip_ratio, clip_ratio_low, clip_ratio_high)
    mask, log_ratio, adv = prepare_loss(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode)
    ratio = torch.exp(log_ratio)
    clipped = ratio.clamp(1.0 - low, 1.0 + high)
    loss_mat = -clipped.detach() * adv * _log_prob(log_prob, mask)
    loss = finish_loss(loss_mat, mask, loss_agg_mode, rollout_is_weights, options)
    return loss, {
        "clipfrac": masked_mean((ratio != clipped).float(), mask).detach(),
        "ppo_kl": masked_mean(-log_ratio, mask).detach(),
    }


def sapo(
    *, old_log_prob: Tensor, log_prob: Tensor, advantages: Tensor, response_mask: Tensor,
    loss_agg_mode: str = "seq-mean-token-mean", clip_ratio: float = 0.2, clip_ratio_low: float | None = None,
    clip_ratio_high: float | None = None, clip_ratio_c: float = 3.0, options: Mapping[str, Any] | None = None,
    rollout_is_weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Soft Adaptive Policy Optimization (Qwen 2025, arXiv:2511.20347): a smooth gate instead
    of a hard clip, ``f(r) = sigmoid(tau (r - 1)) * 4 / tau`` with ``tau = tau_pos`` (1.0) for
    ``A > 0`` and ``tau_neg`` (1.05) otherwise; ``L_t = -f(r_t) A_t``.

    Like verl, the loss is always aggregated ``seq-mean-token-mean`` (``loss_agg_mode`` is
    checked, not used)."""
    mask, log_ratio, adv = prepare_loss(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode)
    tau = torch.where(adv > 0, float(_opt(options, "tau_pos", 1.0)), float(_opt(options, "tau_neg", 1.05)))
    gates = torch.sigmoid(tau * (torch.exp(log_ratio) - 1.0)) * (4.0 / tau)
    loss = finish_loss(-gates * adv, mask, "seq-mean-token-mean", rollout_is_weights, options)
    return loss, {"ppo_kl": masked_mean(-log_ratio, mask).detach(), "clipfrac": loss.new_zeros(()).detach()}


def geo_mean(
    *, old_log_prob: Tensor, log_prob: Tensor, advantages: Tensor, response_mask: Tensor,
    loss_agg_mode: str = "token-mean", clip_ratio: float = 0.2, clip_ratio_low: float | None = None,
    clip_ratio_high: float | None = None, clip_ratio_c: float = 3.0, options: Mapping[str, Any] | None = None,
    rollout_is_weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Geometric-Mean Policy Optimization (Zhao et al. 2025, arXiv:2507.20673): the sequence
    ratio is the geometric mean of the token ratios, each clipped in log space to
    ``[-eps_low, eps_high]`` on the side the advantage's sign makes pessimistic;
    ``L_i = -mean_t(A) * exp(mean_t(clipped log r))``, averaged over all rows (as verl;
    ``loss_agg_mode`` is checked, not used). Rollout IS weights enter as their per-sequence
    geometric mean. Metrics: ``clipfrac`` (clipped tokens with A > 0), ``clipfrac_lower``
    (A < 0), ``ppo_kl``. The log-ratio is not clamped (as verl)."""
    low, high = clip_range(clip_ratio, clip_ratio_low, clip_ratio_high)
    mask, _, adv = prepare_loss(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode)
    log_ratio = zero_masked(log_prob.float() - old_log_prob.detach().float(), mask)
    sign = torch.sign(adv)
    clamped = log_ratio.clamp(-low, high)
    pessimistic = sign * torch.minimum(sign * log_ratio, sign * clamped)
    w = mask.float()
    lengths = w.sum(dim=-1) + 1e-8
    ratio = torch.exp((pessimistic * w).sum(dim=-1) / lengths)
    seq_adv = (adv * w).sum(dim=-1) / lengths
    per_seq = -seq_adv * ratio
    if rollout_is_weights is not None:
        log_w = torch.log(zero_masked(rollout_is_weights.detach().float(), mask) + 1e-10)
        per_seq = per_seq * torch.exp((log_w * w).sum(dim=-1) / lengths)
    clipped = log_ratio != clamped
    return per_seq.mean(), {
        "clipfrac": masked_mean((clipped & (adv > 0)).float(), mask).detach(),
        "clipfrac_lower": masked_mean((clipped & (adv < 0)).float(), mask).detach(),
        "ppo_kl": masked_mean(-log_ratio, mask).detach(),
    }


def _dppo(kind: str, old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, clip_ratio, clip_ratio_low,
          clip_ratio_high, clip_ratio_c, options, rollout_is_weights):
    low, high = clip_range(clip_ratio, clip_ratio_low, clip_ratio_high)
    mask, log_ratio, adv = prepare_loss(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode)
    ratio = torch.exp(log_ratio)
    lp = _log_prob(log_prob, mask)
    old = zero_masked(old_log_prob.detach().float(), mask)
    prob, old_prob = torch.exp(lp), torch.exp(old)
    if kind == "tv":
        keep_pos = (prob - old_prob) <= high
        keep_neg = (prob - old_prob) >= -low
    else:
        binary_kl = old_prob * (old - lp) + (1 - old_prob) * torch.log((1.0 - old_prob + 1e-8) / (1.0 - prob + 1e-8))
        keep_pos = (binary_kl <= high) | (prob <= old_prob)
        keep_neg = (binary_kl <= low) | (prob >= old_prob)
    keep = torch.where(adv > 0, keep_pos, keep_neg).detach().float()
    truncated = ratio.clamp(max=clip_ratio_c).detach()
    loss = finish_loss(-adv * truncated * lp * keep, mask, loss_agg_mode, rollout_is_weights, options)
    return loss, {
        "clipfrac": masked_mean(1.0 - keep, mask).detach(),
        "clipfrac_lower": masked_mean((ratio > clip_ratio_c).float() * keep, mask).detach(),
        "ppo_kl": masked_mean(-log_ratio, mask).detach(),
    }


def dppo_tv(
    *, old_log_prob: Tensor, log_prob: Tensor, advantages: Tensor, response_mask: Tensor,
    loss_agg_mode: str = "token-mean", clip_ratio: float = 0.2, clip_ratio_low: float | None = None,
    clip_ratio_high: float | None = None, clip_ratio_c: float = 3.0, options: Mapping[str, Any] | None = None,
    rollout_is_weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """DPPO-Binary-TV (arXiv:2602.04879, as verl): a token counts only while the
    probability moved less than ``clip_ratio_high`` up (A > 0) / ``clip_ratio_low`` down
    (A <= 0); ``L_t = -A_t sg[min(r_t, clip_ratio_c)] log pi(y_t)`` on those tokens.
    Here ``clip_ratio*`` are total-variation thresholds, not ratio ranges."""
    return _dppo("tv", old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, clip_ratio, clip_ratio_low,
                 clip_ratio_high, clip_ratio_c, options, rollout_is_weights)


def dppo_kl(
    *, old_log_prob: Tensor, log_prob: Tensor, advantages: Tensor, response_mask: Tensor,
    loss_agg_mode: str = "token-mean", clip_ratio: float = 0.2, clip_ratio_low: float | None = None,
    clip_ratio_high: float | None = None, clip_ratio_c: float = 3.0, options: Mapping[str, Any] | None = None,
    rollout_is_weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """DPPO-Binary-KL (arXiv:2602.04879, as verl): as :func:`dppo_tv` with the binary KL
    between the old and new probability of the sampled token as the divergence (a token
    moving towards the pessimistic side is always kept)."""
    return _dppo("kl", old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, clip_ratio, clip_ratio_low,
                 clip_ratio_high, clip_ratio_c, options, rollout_is_weights)


def gspo(
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
    """Group Sequence Policy Optimization (Zheng et al. 2025, "Group Sequence Policy
    Optimization", Qwen team): the importance ratio is per *sequence*,
    ``s_i = exp(mean_t(log_prob - old_log_prob))`` over the valid tokens
    (the length-normalised sequence likelihood ratio), and is clipped per
    sequence.

    Implemented in the paper's GSPO-token form: every token gets
    ``s_{i,t} = sg[s_i] * pi(y_t) / sg[pi(y_t)]``, whose value is ``s_i`` and whose
    gradient is ``s_i * grad log pi(y_t)``; then the PPO clipped surrogate per
    token. With advantages constant along a sequence and
    ``loss_agg_mode="seq-mean-token-mean"`` this is exactly sequence-level
    GSPO; per-token advantages are allowed.

    Shapes: all inputs ``[B, T]`` -> (0-d loss, metrics ``clipfrac``, ``ppo_kl``).

    Departures / settings: the paper uses tiny clip ranges (left 3e-4, right
    4e-4 in v2), not PPO's 0.2: set ``actor.clip_ratio_low`` / ``clip_ratio_high``.
    The paper aggregates with ``seq-mean-token-mean``; ``loss_agg_mode`` is
    honoured as given (as verl 0.9.1). As verl, the per-token log-ratios are
    not clamped before the sequence mean, and the token log-ratio is clamped
    at 10 from above (its gradient is 0 beyond). ``clip_ratio_c`` is ignored.
    """
    low, high = clip_range(clip_ratio, clip_ratio_low, clip_ratio_high)
    mask, _, adv = prepare_loss(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode)
    raw_log_ratio = zero_masked(log_prob.float() - old_log_prob.float(), mask)
    lengths = mask.sum(dim=-1).clamp_min(1).to(torch.float32)  # [B]
    seq_log_ratio = raw_log_ratio.sum(dim=-1) / lengths  # [B]
    lp = zero_masked(log_prob.float(), mask)
    token_log_ratio = (lp - lp.detach() + seq_log_ratio.detach().unsqueeze(-1)).clamp(max=GSPO_LOG_RATIO_MAX)
    loss_mat, was_clipped = clipped_surrogate(torch.exp(token_log_ratio), adv, low, high)
    loss = finish_loss(loss_mat, mask, loss_agg_mode, rollout_is_weights, options)
    metrics = {
        "clipfrac": masked_mean(was_clipped.float(), mask).detach(),
        "ppo_kl": masked_mean(-raw_log_ratio, mask).detach(),
    }
    return loss, metrics
