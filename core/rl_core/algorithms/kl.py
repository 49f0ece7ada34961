"""KL estimators (k1, abs, k2, k3 and their straight-through ``+`` kinds), KL-coefficient controllers and the
KL-in-reward penalty; docs/algorithms.md, "KL" has the table and the clamps."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from rl_core.algorithms.masked import (
    bool_mask,
    check_same_shape,
    masked_mean,
    zero_masked,
)
from rl_core.algorithms.options import KL_KINDS

K3_CLAMP = 10.0
LOG_RATIO_CLAMP = 20.0


def kl_penalty(log_prob: Tensor, ref_log_prob: Tensor, kind: str = "low_var_kl") -> Tensor:
    """Per-token KL estimate ``kind`` of the policy from the reference: same shape, float32, differentiable w.r.t.
    ``log_prob``; every position is computed (masking is the caller's)."""
    if kind not in KL_KINDS:
        raise ValueError(f"KL kind {kind!r} is not supported; use one of {', '.join(repr(k) for k in KL_KINDS)}")
    if tuple(log_prob.shape) != tuple(ref_log_prob.shape):
        raise ValueError(f"log_prob {tuple(log_prob.shape)} and ref_log_prob {tuple(ref_log_prob.shape)} differ in shape")
    if kind.endswith("+"):
        base = _kl_forward(log_prob, ref_log_prob, kind[:-1])
        if kind[:-1] in ("k2", "mse"):
            return base
        k2 = _kl_forward(log_prob, ref_log_prob, "k2")
        return k2 - k2.detach() + base.detach()  # value: base; gradient: k2's
    return _kl_forward(log_prob, ref_log_prob, kind)


def _kl_forward(log_prob: Tensor, ref_log_prob: Tensor, kind: str) -> Tensor:
    d = log_prob.float() - ref_log_prob.float()
    if kind in ("k1", "kl"):
        return d
    if kind == "abs":
        return d.abs()
    if kind in ("k2", "mse"):
        return 0.5 * d.square()
    # k3: with r = pi_ref / pi = exp(-d), KL ~= r - 1 - log r = exp(-d) - 1 + d
    neg_d = (-d).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return (torch.exp(neg_d) - 1.0 - neg_d).clamp(-K3_CLAMP, K3_CLAMP)


class FixedKLController:
    """A constant KL coefficient ``value``; :meth:`update` does nothing."""

    def __init__(self, kl_coef: float) -> None:
        self.value = float(kl_coef)

    def update(self, current_kl: float, n_steps: int) -> None:
        """No-op (kept for the common controller interface)."""

    def __repr__(self) -> str:
        return f"FixedKLController(value={self.value})"


class AdaptiveKLController:
    """Proportional KL-coefficient controller (Ziegler et al. 2019, section 2.2): ``value *= 1 + e * n_steps / horizon``,
    ``e = clip(current_kl / target_kl - 1, -0.2, 0.2)``, ``n_steps`` the sequences ``current_kl`` was measured on."""

    def __init__(self, init_kl_coef: float, target_kl: float, horizon: int) -> None:
        if target_kl <= 0 or horizon <= 0:
            raise ValueError(f"AdaptiveKLController needs target_kl > 0 and horizon > 0, got {target_kl}, {horizon}")
        self.value = float(init_kl_coef)
        self.target = float(target_kl)
        self.horizon = int(horizon)

    def update(self, current_kl: float, n_steps: int) -> None:
        error = min(max(float(current_kl) / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + error * n_steps / self.horizon

    def __repr__(self) -> str:
        return f"AdaptiveKLController(value={self.value}, target={self.target}, horizon={self.horizon})"


def kl_controller_from_config(cfg: Any) -> FixedKLController | AdaptiveKLController:
    """Build a controller from :class:`rl_core.config.schema.KLControlConfig`."""
    if cfg.type == "fixed":
        return FixedKLController(cfg.kl_coef)
    if cfg.type == "adaptive":
        return AdaptiveKLController(cfg.kl_coef, cfg.target_kl, cfg.horizon)
    raise ValueError(f"algorithm.kl_ctrl.type={cfg.type!r} is not supported; use 'fixed' or 'adaptive'")


@torch.no_grad()
def apply_kl_penalty(
    token_level_scores: Tensor,
    old_log_prob: Tensor,
    ref_log_prob: Tensor,
    response_mask: Tensor,
    kl_ctrl: FixedKLController | AdaptiveKLController,
    kind: str = "kl",
    *,
    update: bool = True,
) -> tuple[Tensor, dict[str, float]]:
    """KL in the reward: ``scores - beta * kl`` on valid tokens (float32, 0 masked), ``beta`` the controller's value before
    its update (``update=True``, with ``n_steps = B``); metrics ``actor/reward_kl_penalty`` and ``..._coeff``."""
    check_same_shape("token_level_scores", token_level_scores, response_mask)
    mask = bool_mask(response_mask)
    kld = zero_masked(kl_penalty(old_log_prob, ref_log_prob, kind), mask)  # [B, T]
    beta = float(kl_ctrl.value)
    rewards = zero_masked(token_level_scores.float() - beta * kld, mask)
    per_seq = masked_mean(kld, mask, dim=-1)  # [B]
    has_tokens = mask.any(dim=-1)
    current_kl = float(masked_mean(per_seq, has_tokens)) if has_tokens.any() else 0.0
    if update:
        kl_ctrl.update(current_kl, n_steps=int(token_level_scores.shape[0]))
    return rewards, {"actor/reward_kl_penalty": current_kl, "actor/reward_kl_penalty_coeff": beta}
