"""Issue 13's options through the whole loop: a 2-step GRPO job with the static decoder, chunked log-probs and
token-budget micro-batches on gives the same metrics as the same job with them off."""

from __future__ import annotations

import pytest

from tests.e2e.helpers import train_tiny

pytest.importorskip("rl_train_fsdp", reason="needs the rl-train-fsdp plugin (pip install -e plugins/train_fsdp)")


def _run(tmp, **extra):
    return train_tiny(tmp, steps=2, **extra)


def test_the_options_change_nothing_but_speed(tmp_path):
    off = _run(tmp_path / "off", model__logprob_chunk_size=0, rollout__engine_kwargs={"static_decode": False})
    on = _run(
        tmp_path / "on", model__logprob_chunk_size=5, rollout__engine_kwargs={"static_decode": True},
        actor__use_dynamic_bsz=True, actor__ppo_max_token_len_per_gpu=60,  # 1-2 sequences of <= 40 tokens per micro-batch
    )
    assert [r["step"] for r in on] == [r["step"] for r in off] == [1, 2]
    for a, b in zip(off, on):
        assert a["response_length/mean"] == b["response_length/mean"]  # the same samples
        for key in ("reward/mean", "actor/pg_loss", "actor/grad_norm", "actor/entropy"):
            assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-6), (a["step"], key)
