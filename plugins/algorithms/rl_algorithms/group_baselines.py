"""More group-baseline estimators (verl's ``opo``, ``grpo_passk``, ``gpg``).

Same keyword-only signature and conventions as :mod:`rl_core.algorithms.advantages`
(masks, groups of one, ``returns`` option, float32 outputs, no gradient).
"""

from __future__ import annotations

from typing import Any, Mapping

import torch
from rl_algorithms.estimators import rloo
from rl_core.algorithms.advantages import (
    GRPO_EPS,
    check_index,
    group_outputs,
    group_stats,
    no_signal,
    option,
    prepare_rewards,
    sequence_scores,
)
from torch import Tensor


@torch.no_grad()
def opo(
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
    """On-Policy RL with the Optimal reward baseline (Hao et al. 2025, "On-Policy RL
    with Optimal Reward Baseline"): the baseline is the group's length-weighted mean score,
    ``b = sum_j |y_j| r_j / sum_j |y_j|``; ``A_i = r_i - b``, broadcast over the valid tokens.

    Shapes: rewards, mask ``[B, T]``, index ``[B]`` -> ``[B, T]`` float32.
    A group of one has baseline 0 (verl), unless ``zero_singleton_groups``.
    """
    rewards, mask = prepare_rewards(token_level_rewards, response_mask)
    idx = check_index(index, rewards.shape[0], "opo", rewards.device)
    scores = sequence_scores(rewards)
    lengths = mask.sum(dim=-1).to(torch.float32)
    _, inv = torch.unique(idx, return_inverse=True)
    n_groups = int(inv.max()) + 1 if inv.numel() else 0
    zeros = scores.new_zeros(n_groups)
    weighted = zeros.index_add(0, inv, lengths * scores)
    total_len = zeros.index_add(0, inv, lengths)
    stats = group_stats(scores, idx)
    baseline = torch.where(stats["count"] < 2, torch.zeros_like(scores), (weighted / total_len)[inv])
    per_seq = torch.where(no_signal(stats, options), torch.zeros_like(scores), scores - baseline)
    return group_outputs(per_seq, rewards, mask, options)


@torch.no_grad()
def grpo_passk(
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
    """Pass@k training (Chen et al. 2025, arXiv:2503.19595, as implemented by verl):
    in each group only the best response gets an advantage, ``r_max - r_second_max``
    (divided by the group's std + eps when ``norm_adv_by_std``, default True); the
    others get 0.

    Shapes: rewards, mask ``[B, T]``, index ``[B]`` -> ``[B, T]`` float32. Every group
    needs at least 2 samples (error otherwise, as verl). Ties for the best score go
    to the first of them in batch order.
    """
    rewards, mask = prepare_rewards(token_level_rewards, response_mask)
    idx = check_index(index, rewards.shape[0], "grpo_passk", rewards.device)
    scores = sequence_scores(rewards)
    per_seq = torch.zeros_like(scores)
    eps = float(option(options, "epsilon", GRPO_EPS))
    for group in torch.unique(idx):
        rows = torch.nonzero(idx == group).squeeze(-1)
        if rows.numel() < 2:
            raise ValueError(
                f"grpo_passk needs at least 2 samples per group; group {int(group)} has {rows.numel()}: set rollout.n >= 2"
            )
        top, where = torch.topk(scores[rows], 2)
        adv = top[0] - top[1]
        if option(options, "norm_adv_by_std", True):
            adv = adv / (scores[rows].std() + eps)
        per_seq[rows[where[0]]] = adv
    return group_outputs(per_seq, rewards, mask, options)


@torch.no_grad()
def gpg(
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
    """Group Policy Gradient (Chu et al. 2025, "GPG: A Simple and Strong Reinforcement
    Learning Baseline for Model Reasoning"): ``A_i = alpha (r_i - mean_group(r)) / f_norm``
    with ``alpha = B / #{i: r_i != 0}`` (the batch size over the number of non-zero
    scores: it up-weights batches where few responses earn a reward) and ``f_norm``
    (option, default 1). Pair with the ``gpg`` policy loss.

    Shapes: rewards, mask ``[B, T]``, index ``[B]`` -> ``[B, T]`` float32.
    A group of one has mean 0 (verl), unless ``zero_singleton_groups``.
    """
    rewards, mask = prepare_rewards(token_level_rewards, response_mask)
    idx = check_index(index, rewards.shape[0], "gpg", rewards.device)
    scores = sequence_scores(rewards)
    stats = group_stats(scores, idx)
    alpha = scores.shape[0] / torch.count_nonzero(scores).clamp(min=1).to(torch.float32)
    mean = torch.where(stats["count"] < 2, torch.zeros_like(scores), stats["mean"])
    centred = alpha * (scores - mean) / float(option(options, "f_norm", 1.0))
    per_seq = torch.where(no_signal(stats, options), torch.zeros_like(scores), centred)
    return group_outputs(per_seq, rewards, mask, options)


def rloo_vectorized(**kwargs: Any) -> tuple[Tensor, Tensor]:
    """verl's ``rloo_vectorized``: RLOO, except that a group of one gets advantage 0 (verl's
    loop version ``rloo`` keeps its raw score; the two disagree there, and we follow each)."""

    options = {**(kwargs.pop("options", None) or {}), "zero_singleton_groups": True}
    return rloo(options=options, **kwargs)
