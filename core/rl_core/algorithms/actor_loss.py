"""The full actor and critic losses for train backends: a backend runs the forward pass, then calls
:func:`compute_actor_loss` / :func:`compute_critic_loss` on one micro-batch and back-propagates the result.
The formula and metric names: docs/algorithms.md. Metrics are detached 0-d tensors (no host sync per micro-batch)."""

from __future__ import annotations

from typing import Any, Callable

from torch import Tensor

from rl_core.algorithms.aggregation import agg_loss
from rl_core.algorithms.kl import kl_penalty
from rl_core.algorithms.masked import masked_mean
from rl_core.algorithms.value_loss import value_loss
from rl_core.algorithms.builtin import builtin_card

# policy-loss metric name -> logged name
_PG_METRICS = {"clipfrac": "actor/pg_clipfrac", "ppo_kl": "actor/ppo_kl", "clipfrac_lower": "actor/pg_clipfrac_lower"}


def get_policy_loss(name: str) -> Callable[..., tuple[Tensor, dict[str, Tensor]]]:
    """Core's built-in policy loss ``name``, for code without a plan (a run passes the Plan's loaded loss)."""

    return builtin_card("policy_loss", name).load()


def compute_actor_loss(
    *,
    log_prob: Tensor,
    old_log_prob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    entropy: Tensor | None = None,
    ref_log_prob: Tensor | None = None,
    rollout_is_weights: Tensor | None = None,
    cfg: Any,
    policy_loss: Callable[..., tuple[Tensor, dict[str, Tensor]]] | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Actor loss of one micro-batch, ``(0-d float32 loss, metrics)``. ``entropy`` is needed when ``cfg.entropy_coeff != 0``,
    ``ref_log_prob`` with ``cfg.use_kl_loss``; ``rollout_is_weights`` weight the policy loss only and are passed to it
    only when given. ``policy_loss``: the Plan's loaded loss (None: the built-in ``cfg.policy_loss``)."""
    mode = cfg.loss_agg_mode
    pg_fn = policy_loss if policy_loss is not None else get_policy_loss(cfg.policy_loss)
    options = dict(getattr(cfg, "policy_loss_options", None) or {})
    norm_length = getattr(cfg, "loss_scale_factor", None)
    if norm_length is not None:
        options.setdefault("norm_length", norm_length)
    extra = {} if rollout_is_weights is None else {"rollout_is_weights": rollout_is_weights}
    pg_loss, pg_metrics = pg_fn(
        old_log_prob=old_log_prob,
        log_prob=log_prob,
        advantages=advantages,
        response_mask=response_mask,
        loss_agg_mode=mode,
        clip_ratio=cfg.clip_ratio,
        clip_ratio_low=cfg.clip_ratio_low,
        clip_ratio_high=cfg.clip_ratio_high,
        clip_ratio_c=cfg.clip_ratio_c,
        options=options,
        **extra,
    )
    metrics: dict[str, Tensor] = {"actor/pg_loss": pg_loss.detach()}
    for key, value in pg_metrics.items():
        metrics[_PG_METRICS.get(key, f"actor/{key}")] = value
    loss = pg_loss

    if cfg.entropy_coeff != 0 and entropy is None:
        raise ValueError(f"actor.entropy_coeff={cfg.entropy_coeff} needs the per-token `entropy` of the policy")
    if entropy is not None:
        entropy_term = agg_loss(entropy, response_mask, mode, norm_length=norm_length)
        metrics["actor/entropy"] = entropy_term.detach()
        if cfg.entropy_coeff != 0:
            loss = loss - cfg.entropy_coeff * entropy_term

    if cfg.use_kl_loss:
        if ref_log_prob is None:
            raise ValueError("actor.use_kl_loss=True needs `ref_log_prob` (enable the reference model)")
        kld = kl_penalty(log_prob, ref_log_prob.detach(), cfg.kl_loss_type)
        kl_term = agg_loss(kld, response_mask, mode, norm_length=norm_length)
        loss = loss + cfg.kl_loss_coef * kl_term
        metrics["actor/kl_loss"] = kl_term.detach()
        metrics["actor/kl_coef"] = kl_term.new_tensor(float(cfg.kl_loss_coef))
    return loss, metrics


def compute_critic_loss(
    *,
    vpreds: Tensor,
    values: Tensor,
    returns: Tensor,
    response_mask: Tensor,
    cfg: Any,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Critic loss of one micro-batch: :func:`~rl_core.algorithms.value_loss.value_loss` with ``cfg``'s clip range and mode."""
    loss, vm = value_loss(
        vpreds=vpreds,
        values=values,
        returns=returns,
        response_mask=response_mask,
        cliprange_value=cfg.cliprange_value,
        loss_agg_mode=cfg.loss_agg_mode,
    )
    return loss, {
        "critic/vf_loss": loss.detach(),
        "critic/vf_clipfrac": vm["vf_clipfrac"],
        "critic/vpred_mean": masked_mean(vpreds.detach(), response_mask),
    }
