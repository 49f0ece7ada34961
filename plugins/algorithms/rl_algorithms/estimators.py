"""Estimators of rl-algorithms: RLOO, REINFORCE++, REINFORCE++-baseline, ReMax.

Same keyword-only signature and conventions as :mod:`rl_core.algorithms.advantages` (masks, groups of one,
``zero_singleton_groups`` and ``returns`` options, float32 outputs, no gradient); registered by
:mod:`rl_algorithms.plugin`.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch
from rl_core.algorithms.advantages import (
    broadcast_rows,
    check_index,
    group_outputs,
    group_returns,
    group_stats,
    no_signal,
    prepare_rewards,
    reward_to_go,
    sequence_scores,
)
from rl_core.algorithms.masked import masked_whiten
from torch import Tensor


@torch.no_grad()
def rloo(
    *,
    token_level_rewards: Tensor,
    response_mask: Tensor,
    index: Tensor | None = None,
    values: Tensor | None = None,
    gamma: float = 1.0,
    lam: float = 1.0,
    baseline_rewards: Tensor | None = None,
    options: Mapping[str, Any] | None = None,
) -> tuple[Tensor, Tensor]:
    """REINFORCE Leave-One-Out (Ahmadian et al. 2024, "Back to Basics: Revisiting
    REINFORCE Style Optimization for Learning from Human Feedback in LLMs").

    ``A_i = r_i - (sum_{j != i} r_j) / (n - 1)`` over the ``n`` responses of a
    group (the baseline is the mean score of the *other* samples), broadcast
    over the valid tokens.

    Shapes: rewards, mask ``[B, T]``, index ``[B]`` -> ``[B, T]`` float32.
    Uses ``index``; ignores ``values``, ``gamma``, ``lam``, ``baseline_rewards``.

    Departures: the paper assumes k >= 2; a group of size 1 keeps its raw
    score as verl does (``zero_singleton_groups``: module docstring). The
    paper's per-token KL penalty in the reward is applied upstream by
    :func:`rl_core.algorithms.kl.apply_kl_penalty`.
    """
    rewards, mask = prepare_rewards(token_level_rewards, response_mask)
    idx = check_index(index, rewards.shape[0], "rloo", rewards.device)
    scores = sequence_scores(rewards)
    stats = group_stats(scores, idx)
    n = stats["count"]
    baseline = torch.where(n < 2, torch.zeros_like(scores), (stats["sum"] - scores) / (n - 1).clamp_min(1))
    per_seq = torch.where(no_signal(stats, options), torch.zeros_like(scores), scores - baseline)
    return group_outputs(per_seq, rewards, mask, options)


@torch.no_grad()
def reinforce_plus_plus(
    *,
    token_level_rewards: Tensor,
    response_mask: Tensor,
    index: Tensor | None = None,
    values: Tensor | None = None,
    gamma: float = 1.0,
    lam: float = 1.0,
    baseline_rewards: Tensor | None = None,
    options: Mapping[str, Any] | None = None,
) -> tuple[Tensor, Tensor]:
    """REINFORCE++ (Hu 2025, "REINFORCE++: A Simple and Efficient Approach for Aligning LLMs").

    ``returns_t`` = discounted reward-to-go of the token rewards (which carry
    the per-token KL penalty when ``use_kl_in_reward``); advantages are the
    returns normalised over **all valid tokens of the batch** (global
    mean 0, std 1; unbiased variance, ``eps=1e-8`` inside the sqrt).

    Shapes: rewards, mask ``[B, T]`` -> ``[B, T]`` float32.
    Uses ``gamma``; ignores ``index``, ``values``, ``lam``, ``baseline_rewards``.

    Departures: the normalisation is over the local batch (the one passed
    in), not a global batch across data-parallel ranks.
    """
    rewards, mask = prepare_rewards(token_level_rewards, response_mask)
    returns = reward_to_go(rewards, mask, gamma)
    return masked_whiten(returns, mask), returns


@torch.no_grad()
def reinforce_plus_plus_baseline(
    *,
    token_level_rewards: Tensor,
    response_mask: Tensor,
    index: Tensor | None = None,
    values: Tensor | None = None,
    gamma: float = 1.0,
    lam: float = 1.0,
    baseline_rewards: Tensor | None = None,
    options: Mapping[str, Any] | None = None,
) -> tuple[Tensor, Tensor]:
    """REINFORCE++-baseline (Hu 2025, REINFORCE++ paper, v2+): subtract the group
    mean score, broadcast over tokens, then normalise over all valid tokens of
    the batch (mean 0, std 1). Group-mean subtraction removes the prompt's
    difficulty; the batch-level std keeps GRPO's per-group std out.

    Shapes: rewards, mask ``[B, T]``, index ``[B]`` -> ``[B, T]`` float32.
    Uses ``index``; ignores ``values``, ``gamma``, ``lam``, ``baseline_rewards``.

    A group of size 1 keeps its raw score (mean 0, as verl) unless
    ``zero_singleton_groups``; an all-equal group is centred to exactly 0.
    After normalisation those tokens are ``-mean/std`` like any other 0, not
    necessarily 0 themselves. ``returns``: module docstring.
    """
    rewards, mask = prepare_rewards(token_level_rewards, response_mask)
    idx = check_index(index, rewards.shape[0], "reinforce_plus_plus_baseline", rewards.device)
    scores = sequence_scores(rewards)
    stats = group_stats(scores, idx)
    mean = torch.where(stats["count"] < 2, torch.zeros_like(scores), stats["mean"])
    centred = torch.where(no_signal(stats, options), torch.zeros_like(scores), scores - mean)
    adv = masked_whiten(broadcast_rows(centred, mask), mask)
    return adv, group_returns(adv, rewards, mask, options)


@torch.no_grad()
def remax(
    *,
    token_level_rewards: Tensor,
    response_mask: Tensor,
    index: Tensor | None = None,
    values: Tensor | None = None,
    gamma: float = 1.0,
    lam: float = 1.0,
    baseline_rewards: Tensor | None = None,
    options: Mapping[str, Any] | None = None,
) -> tuple[Tensor, Tensor]:
    """ReMax (Li et al. 2023, "ReMax: A Simple, Effective, and Efficient Reinforcement
    Learning Method for Aligning Large Language Models").

    ``A_t = G_t - r(x, y_greedy)``: the (undiscounted) reward-to-go minus the
    reward of the greedy response to the same prompt (``baseline_rewards``).

    Shapes: rewards, mask ``[B, T]``, baseline_rewards ``[B]`` -> ``[B, T]`` float32.
    Uses ``baseline_rewards``; ignores ``index``, ``values``, ``gamma``, ``lam``.

    Departures: the paper subtracts the baseline from the sequence reward;
    with token rewards (e.g. a KL penalty per token) we subtract it from the
    reward-to-go at each token, which is the same for an outcome-only reward.
    """
    rewards, mask = prepare_rewards(token_level_rewards, response_mask)
    if baseline_rewards is None:
        raise ValueError("remax needs `baseline_rewards` (Tensor[B]: the reward of the greedy response per sample)")
    if baseline_rewards.dim() != 1 or baseline_rewards.shape[0] != rewards.shape[0]:
        raise ValueError(f"baseline_rewards must be [B]=[{rewards.shape[0]}], got shape {tuple(baseline_rewards.shape)}")
    returns = reward_to_go(rewards, mask)
    adv = returns - baseline_rewards.to(device=rewards.device, dtype=torch.float32).unsqueeze(-1)
    return torch.where(mask, adv, torch.zeros_like(adv)), returns


