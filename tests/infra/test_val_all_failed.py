"""A validation whose every reward failed is an error naming the cause, not `val 0` and exit 0 (issue 31, point 8)."""

from __future__ import annotations

import types

import pytest
import torch
from rl_core.trainer.loop import Trainer
from rl_core.trainer.validation import ValidationError


class _Batch(dict):
    meta: dict = {}  # the rollout batch's per-step counters (val/agent/* reads them); none here


def _trainer(errors_per_batch: list[int], batch: int = 4) -> Trainer:
    t = object.__new__(Trainer)  # validate() alone: the loader, generation and scoring are this test's
    t.kind = None  # the RL loop's own validation (trainer.kind=rl)
    t.val_loader = types.SimpleNamespace(iterate_once=lambda: iter(range(len(errors_per_batch))))
    t.sampling = lambda **kw: None
    t.validation_sampling = lambda: None
    t._keep_val_generations = lambda batch, scores: None
    t.generate = lambda prompts, sampling: _Batch(response_mask=torch.ones(batch, 3), i=prompts)
    t.score_rows = lambda b, train=True: (torch.zeros(batch), {"reward/errors": float(errors_per_batch[b["i"]]), "reward/timeouts": 0.0}, None, [])
    t.ckpt = types.SimpleNamespace(latest=lambda: None)
    return t


def test_every_reward_failed_is_an_error():
    with pytest.raises(ValidationError, match="every one of the 8 rewards failed"):
        _trainer([4, 4]).validate()


def test_some_failed_still_validates():
    out = _trainer([4, 3]).validate()
    assert out["val/samples"] == 8.0 and out["val/accuracy"] == 0.0
