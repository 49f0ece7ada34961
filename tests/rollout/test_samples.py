"""rl_core.rollout.samples: engine samples -> the rollout output, prompt checks (shared by every rollout plugin)."""

from __future__ import annotations

import logging

import pytest
import torch
from rl_core.backends import SamplingParams
from rl_core.batch import Batch
from rl_core.rollout.samples import PromptLengthError
from rl_core.rollout.samples import EMPTY_META_KEY, Sample, build_rollout_batch, check_prompt_lengths, unpadded_prompts

PAD = 0


def _batch() -> Batch:
    ids = torch.tensor([[PAD, PAD, 5, 6], [7, 8, 9, 10]])
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    return Batch({"input_ids": ids, "attention_mask": mask, "index": torch.tensor([0, 1])}, {"uid": ["a", "b"]}, {"step": 3})


def test_left_padding_is_stripped():
    b = _batch()
    assert unpadded_prompts(b["input_ids"], b["attention_mask"]) == [[5, 6], [7, 8, 9, 10]]
    with pytest.raises(ValueError, match="must both be"):
        unpadded_prompts(b["input_ids"], b["attention_mask"][:, :3])


def test_output_rows_masks_and_positions():
    samples = [
        Sample([11, 2], [-0.5, -0.25], "stop"),
        Sample([12, 13, 14], [-1.0, -2.0, -3.0], "length"),
        Sample([15], [-0.125], "stop"),
        Sample([16, 17, 2], [-1, -1, -1], "stop"),
    ]
    out = build_rollout_batch(_batch(), samples, SamplingParams(n=2, max_new_tokens=3, logprobs=True), PAD)
    assert out["responses"].tolist() == [[11, 2, PAD], [12, 13, 14], [15, PAD, PAD], [16, 17, 2]]
    assert out["response_mask"].tolist() == [[1, 1, 0], [1, 1, 1], [1, 0, 0], [1, 1, 1]]
    assert out["rollout_log_probs"].tolist() == [[-0.5, -0.25, 0.0], [-1.0, -2.0, -3.0], [-0.125, 0.0, 0.0], [-1.0, -1.0, -1.0]]
    # prompt 0 is left-padded by 2: positions 0, 0, 0, 1 | 2, 3, 4
    assert out["position_ids"][0].tolist() == [0, 0, 0, 1, 2, 3, 4]
    assert out["position_ids"][2].tolist() == [0, 1, 2, 3, 4, 5, 6]
    assert out["input_ids"][0].tolist() == [PAD, PAD, 5, 6, 11, 2, PAD]
    assert out["attention_mask"][0].tolist() == [0, 0, 1, 1, 1, 1, 0]
    assert out["index"].tolist() == [0, 0, 1, 1] and list(out["uid"]) == ["a", "a", "b", "b"]
    assert out.meta == {"step": 3, EMPTY_META_KEY: 0}
    assert "rollout_log_probs" not in build_rollout_batch(_batch(), samples, SamplingParams(n=2, max_new_tokens=3), PAD).tensors


def test_empty_generation_is_kept_masked_and_reported(caplog):
    samples = [Sample([11], None, "stop"), Sample([], None, "abort"), Sample([15], None, "stop"), Sample([16], None, "stop")]
    with caplog.at_level(logging.WARNING):
        out = build_rollout_batch(_batch(), samples, SamplingParams(n=2, max_new_tokens=2), PAD, engine="TestEngine")
    assert len(out) == 4 and out["response_mask"][1].tolist() == [0, 0] and out["responses"][1].tolist() == [PAD, PAD]
    assert out.meta[EMPTY_META_KEY] == 1
    assert "TestEngine returned 1 empty generation(s) of 4" in caplog.text and "row 1 (prompt 0, finish_reason='abort')" in caplog.text


def test_wrong_sample_count_length_or_log_probs_raise():
    b = _batch()
    with pytest.raises(ValueError, match="TestEngine returned 3 samples for 2 prompts x n=2 = 4"):
        build_rollout_batch(b, [Sample([1])] * 3, SamplingParams(n=2, max_new_tokens=2), PAD, engine="TestEngine")
    with pytest.raises(ValueError, match="sample 0 has 3 tokens, more than max_new_tokens=2"):
        build_rollout_batch(b, [Sample([1, 2, 3])] * 4, SamplingParams(n=2, max_new_tokens=2), PAD)
    with pytest.raises(ValueError, match="sample 0 has 2 tokens but no log-probs"):
        build_rollout_batch(b, [Sample([1, 2])] * 4, SamplingParams(n=2, max_new_tokens=2, logprobs=True), PAD)
    with pytest.raises(ValueError, match="sample 0 has 2 tokens but 1 log-probs"):
        build_rollout_batch(b, [Sample([1, 2], [-1.0])] * 4, SamplingParams(n=2, max_new_tokens=2, logprobs=True), PAD)


class _MyError(PromptLengthError):
    pass


def test_prompt_checks_name_the_sample_the_lengths_and_the_setting():
    with pytest.raises(PromptLengthError) as err:
        check_prompt_lengths([[1] * 3, [1] * 40, [1] * 50], max_new_tokens=4, context_len=1000, max_prompt_length=32)
    msg = str(err.value)
    assert "prompt 1 of the batch has 40 tokens, more than data.max_prompt_length=32" in msg and "(2 prompts" in msg
    kw = dict(context_name="the X engine's window", context_key="rollout.engine_kwargs.window", error=_MyError)
    with pytest.raises(_MyError) as err:
        check_prompt_lengths([[1] * 3, [1] * 30], max_new_tokens=4, context_len=24, **kw)
    assert str(err.value).startswith("prompt 1 of the batch has 30 tokens, longer than the X engine's window 24; raise rollout.engine_kwargs.window")
    with pytest.raises(_MyError, match=r"prompt 0 of the batch has 20 tokens; with max_new_tokens=8 it needs 28 positions, more than the X engine's window 24"):
        check_prompt_lengths([[1] * 20], max_new_tokens=8, context_len=24, **kw)
    with pytest.raises(_MyError, match="prompt 0 of the batch is empty"):
        check_prompt_lengths([[]], max_new_tokens=1, context_len=24, **kw)
    check_prompt_lengths([[1] * 16], max_new_tokens=8, context_len=24, max_prompt_length=16)  # exactly fits
