"""The distill estimator against advantages computed here with plain torch, and the probe core runs at check time."""

from __future__ import annotations

import pytest
import torch
from rl_distill.estimator import distill


def _batch(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    b, t = 6, 5
    mask = torch.ones(b, t)
    mask[1, 3:] = 0
    mask[4, 1:] = 0
    student = -torch.rand(b, t, generator=g) * 3
    teacher = -torch.rand(b, t, generator=g) * 3
    rewards = torch.zeros(b, t)
    last = mask.sum(-1).long() - 1
    rewards[torch.arange(b), last] = torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0, 1.0])
    index = torch.tensor([0, 0, 0, 1, 1, 1])
    return rewards, mask, index, student, teacher


def test_pure_distillation_is_the_per_token_log_prob_gap():
    rewards, mask, index, student, teacher = _batch()
    adv, ret = distill(token_level_rewards=rewards, response_mask=mask, index=index, options={"kl_coef": 0.5},
                       log_probs={"actor": student, "teacher": teacher})
    expected = torch.zeros_like(student)
    for i in range(student.shape[0]):
        for j in range(student.shape[1]):
            if mask[i, j]:
                expected[i, j] = 0.5 * (teacher[i, j] - student[i, j])
    torch.testing.assert_close(adv, expected)
    torch.testing.assert_close(ret, expected)
    assert adv.dtype == torch.float32


def test_reward_part_is_grpo_of_the_sequence_reward():
    rewards, mask, index, student, teacher = _batch(1)
    adv, _ = distill(token_level_rewards=rewards, response_mask=mask, index=index,
                     options={"kl_coef": 1.0, "reward_weight": 2.0, "norm_adv_by_std": True, "epsilon": 1e-6},
                     log_probs={"actor": student, "teacher": teacher})
    scores = [float(rewards[i].sum()) for i in range(6)]
    grpo = []
    for i in range(6):
        group = [scores[k] for k in range(6) if index[k] == index[i]]
        mean = sum(group) / len(group)
        std = (sum((s - mean) ** 2 for s in group) / (len(group) - 1)) ** 0.5
        grpo.append((scores[i] - mean) / (std + 1e-6))
    expected = (teacher - student + 2.0 * torch.tensor(grpo)[:, None]) * mask
    torch.testing.assert_close(adv, expected)


def test_core_grpo_agrees_on_the_reward_part():
    """The plugin's group baseline (it may not import core's algorithms) equals core's grpo estimator."""
    from rl_core.algorithms.advantages import grpo

    rewards, mask, index, student, _ = _batch(2)
    adv, _ = distill(token_level_rewards=rewards, response_mask=mask, index=index, options={"kl_coef": 0.0, "reward_weight": 1.0},
                     log_probs={"actor": student, "teacher": student})
    ref, _ = grpo(token_level_rewards=rewards, response_mask=mask, index=index, options={"norm_adv_by_std": True})
    torch.testing.assert_close(adv, ref)


def test_missing_log_probs_is_a_clear_error():
    rewards, mask, index, student, _ = _batch()
    with pytest.raises(ValueError, match="log_probs\\['actor'\\] and log_probs\\['teacher'\\]"):
        distill(token_level_rewards=rewards, response_mask=mask, index=index, log_probs={"actor": student})
