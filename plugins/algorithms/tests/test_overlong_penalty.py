"""DAPO's overlong-response penalty (rl_algorithms.overlong), worked by hand."""

from __future__ import annotations

import pytest
import torch
from rl_algorithms.overlong import OverlongPenalty, overlong_penalty, response_lengths
from rl_core.batch import Batch


def test_penalty_by_hand():
    # M = 20, L = 8: no penalty up to 20 - 8 = 12 tokens, then -(n - 12) / 8 * 0.5, reaching -0.5 at 20
    lengths = torch.tensor([10, 12, 13, 16, 20])
    got = overlong_penalty(lengths, max_length=20, buffer_length=8, penalty_factor=0.5)
    assert got.tolist() == [0.0, 0.0, -0.0625, -0.25, -0.5]


def test_apply_adds_the_penalty_and_logs_it():
    p = OverlongPenalty(max_length=20, buffer_length=8, penalty_factor=0.5, log=True)
    scores, metrics = p.apply(torch.tensor([1.0, 1.0, 0.0, 1.0, 0.5]), torch.tensor([10, 12, 13, 16, 20]))
    assert scores.tolist() == [1.0, 1.0, -0.0625, 0.75, 0.0]
    assert metrics["reward/overlong_penalty_mean"] == pytest.approx((-0.0625 - 0.25 - 0.5) / 5)
    assert metrics["reward/overlong_fraction"] == pytest.approx(3 / 5)
    _, quiet = OverlongPenalty(max_length=20, buffer_length=8, penalty_factor=0.5, log=False).apply(torch.zeros(5), torch.full((5,), 20))
    assert quiet == {}


def test_lengths_count_every_real_response_token():
    # 2 prompt columns + 4 response columns; row 1's mask has a tool-output hole that verl's length still counts
    attention = torch.tensor([[1, 1, 1, 1, 1, 0], [0, 1, 1, 1, 1, 1]])
    batch = Batch({"responses": torch.zeros(2, 4, dtype=torch.long), "attention_mask": attention})
    assert response_lengths(batch).tolist() == [3, 4]


def test_from_config_reads_the_section_and_defaults_to_the_data_maximum():
    from rl_core.config.load import load_config

    cfg = load_config(None, ["data.max_response_length=64", "reward.overlong_penalty.enable=true", "reward.overlong_penalty.buffer_length=16"])
    assert OverlongPenalty.from_config(cfg) == OverlongPenalty(max_length=64, buffer_length=16, penalty_factor=1.0, log=False)
    assert OverlongPenalty.from_config(load_config(None, [])) is None
