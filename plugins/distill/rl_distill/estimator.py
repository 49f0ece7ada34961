"""The ``distill`` advantage estimator: the per-token reverse KL against the teacher as a dense advantage.

For a response sampled from the student ``pi``, token ``t`` gets ``A_t = kl_coef * (log q(y_t) - log pi(y_t))``
(``q``: the teacher; the negative of the sampled-token estimate of ``KL(pi || q)`` at that position), plus
``reward_weight`` times GRPO's group-relative advantage of the response's reward when ``reward_weight > 0``.
With the policy-gradient loss this is on-policy distillation: ``-E_pi[(log pi - log q) grad log pi]`` is the
gradient of ``-KL(pi || q)`` over sampled tokens (no discounting: each token is scored on its own).
"""

from __future__ import annotations

from typing import Any, Mapping

import torch
from torch import Tensor


@torch.no_grad()
def distill(
    *,
    token_level_rewards: Tensor,
    response_mask: Tensor,
    index: Tensor | None = None,
    values: Tensor | None = None,
    gamma: float = 1.0,
    lam: float = 1.0,
    baseline_rewards: Tensor | None = None,
    options: Mapping[str, Any] | None = None,
    log_probs: Mapping[str, Tensor] | None = None,
) -> tuple[Tensor, Tensor]:
    """``(advantages, returns)`` ``[B, T]`` float32, 0 at masked positions; ``returns`` equal the advantages."""
    opts = dict(options or {})
    if not log_probs or "actor" not in log_probs or "teacher" not in log_probs:
        raise ValueError("the distill estimator needs log_probs['actor'] and log_probs['teacher'] (rl-core passes them when the card declares log_probs)")
    mask = response_mask.bool()
    gap = log_probs["teacher"].float() - log_probs["actor"].float()
    adv = float(opts.get("kl_coef", 1.0)) * gap
    weight = float(opts.get("reward_weight", 0.0))
    if weight > 0:
        if index is None:
            raise ValueError("the distill estimator with reward_weight > 0 needs group ids (rollout.n > 1)")
        base = group_advantage(token_level_rewards.float(), mask, index, norm=bool(opts.get("norm_adv_by_std", True)),
                               eps=float(opts.get("epsilon", 1e-6)))
        adv = adv + weight * base[:, None]
    adv = torch.where(mask, adv, torch.zeros_like(adv))
    return adv, adv.clone()


def group_advantage(rewards: Tensor, mask: Tensor, index: Tensor, *, norm: bool, eps: float) -> Tensor:
    """GRPO's per-response advantage ``[B]``: ``(r - mean) / (std + eps)`` within each group of ``index`` (sequence
    score: the sum of the valid tokens' rewards; a group of one: mean 0, std 1; an all-equal group: 0)."""
    scores = torch.where(mask, rewards, torch.zeros_like(rewards)).sum(-1)
    out = torch.zeros_like(scores)
    for g in index.unique():
        rows = index == g
        s = scores[rows]
        if s.numel() < 2:
            out[rows] = s
            continue
        if bool((s == s[0]).all()):
            continue
        c = s - s.mean()
        out[rows] = c / (s.std() + eps) if norm else c
    return out
