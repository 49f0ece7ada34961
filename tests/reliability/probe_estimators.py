"""Estimators with a broken contract, registered by tests/reliability/test_check_probes.py."""

from __future__ import annotations


def returns_nothing(**kwargs):
    return None


def returns_one_tensor(*, token_level_rewards, **kwargs):
    return token_level_rewards.clone()


def returns_per_sequence(*, token_level_rewards, **kwargs):
    seq = token_level_rewards.sum(-1)  # [B] instead of [B, T]
    return seq, seq


def fine(*, token_level_rewards, response_mask, **kwargs):
    return token_level_rewards * response_mask, token_level_rewards * response_mask
