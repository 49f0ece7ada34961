"""Batch conversion, prompt checks and weight buckets: pure functions, no engine."""

from __future__ import annotations

import logging

import pytest
import torch
from rl_core.backends import SamplingParams
from rl_core.batch import Batch
from rl_rollout_vllm.convert import EMPTY_META_KEY, Sample, build_rollout_batch, check_prompt_lengths, unpadded_prompts
from rl_rollout_vllm.weights import buckets, layer_key

PAD = 0


def _batch() -> Batch:
    ids = torch.tensor([[PAD, PAD, 5, 6], [7, 8, 9, 10]])
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    return Batch({"input_ids": ids, "attention_mask": mask, "index": torch.tensor([0, 1])}, {"uid": ["a", "b"]}, {"step": 3})


def test_left_padding_is_stripped():
    b = _batch()
    assert unpadded_prompts(b["input_ids"], b["attention_mask"]) == [[5, 6], [7, 8, 9, 10]]


def test_output_rows_masks_and_positions():
    b = _batch()
    samples = [Sample([11, 2], [-0.5, -0.25], "stop"), Sample([12, 13, 14], [-1.0, -2.0, -3.0], "length"), Sample([15], [-0.125], "stop"), Sample([16, 17, 2], [-1, -1, -1], "stop")]
    out = build_rollout_batch(b, samples, SamplingParams(n=2, max_new_tokens=3, logprobs=True), PAD)
    assert out["responses"].tolist() == [[11, 2, PAD], [12, 13, 14], [15, PAD, PAD], [16, 17, 2]]
    assert out["response_mask"].tolist() == [[1, 1, 0], [1, 1, 1], [1, 0, 0], [1, 1, 1]]
    assert out["rollout_log_probs"].tolist() == [[-0.5, -0.25, 0.0], [-1.0, -2.0, -3.0], [-0.125, 0.0, 0.0], [-1.0, -1.0, -1.0]]
    # prompt 0 is left-padded by 2: positions 0, 0, 0, 1 | 2, 3, 4
    assert out["position_ids"][0].tolist() == [0, 0, 0, 1, 2, 3, 4]
    assert out["position_ids"][2].tolist() == [0, 1, 2, 3, 4, 5, 6]
    assert out["input_ids"][0].tolist() == [PAD, PAD, 5, 6, 11, 2, PAD]
    assert out["attention_mask"][0].tolist() == [0, 0, 1, 1, 1, 1, 0]
    assert out["index"].tolist() == [0, 0, 1, 1]
    assert list(out["uid"]) == ["a", "a", "b", "b"]
    assert out.meta == {"step": 3, EMPTY_META_KEY: 0}


def test_empty_generation_is_kept_masked_and_reported(caplog):
    b = _batch()
    samples = [Sample([11], None, "stop"), Sample([], None, "abort"), Sample([15], None, "stop"), Sample([16], None, "stop")]
    with caplog.at_level(logging.WARNING, logger="rl_rollout_vllm.convert"):
        out = build_rollout_batch(b, samples, SamplingParams(n=2, max_new_tokens=2), PAD)
    assert len(out) == 4 and out["response_mask"][1].tolist() == [0, 0]
    assert out["responses"][1].tolist() == [PAD, PAD]
    assert out.meta[EMPTY_META_KEY] == 1
    assert "1 empty generation(s)" in caplog.text and "row 1 (prompt 0, finish_reason='abort')" in caplog.text


def test_wrong_sample_count_or_log_probs_raise():
    b = _batch()
    with pytest.raises(ValueError, match="3 samples for 2 prompts x n=2 = 4"):
        build_rollout_batch(b, [Sample([1])] * 3, SamplingParams(n=2, max_new_tokens=2), PAD)
    with pytest.raises(ValueError, match="sample 0 has 2 tokens but none log-probs"):
        build_rollout_batch(b, [Sample([1, 2])] * 4, SamplingParams(n=2, max_new_tokens=2, logprobs=True), PAD)


def test_prompt_longer_than_max_prompt_length_names_sample_and_lengths():
    with pytest.raises(ValueError) as err:
        check_prompt_lengths([[1] * 3, [1] * 40, [1] * 50], max_new_tokens=4, max_model_len=1000, max_prompt_length=32)
    msg = str(err.value)
    assert "prompt 1 of the batch has 40 tokens" in msg and "data.max_prompt_length=32" in msg and "2 prompts" in msg


def test_prompt_longer_than_engine_max_model_len_names_sample_and_lengths():
    with pytest.raises(ValueError) as err:
        check_prompt_lengths([[1] * 3, [1] * 30], max_new_tokens=4, max_model_len=24)
    msg = str(err.value)
    assert "prompt 1 of the batch has 30 tokens, longer than the vLLM engine's max model length 24" in msg
    with pytest.raises(ValueError, match=r"prompt 0 of the batch has 20 tokens; with max_new_tokens=8 it needs 28 positions, more than the vLLM engine's max model length 24"):
        check_prompt_lengths([[1] * 20], max_new_tokens=8, max_model_len=24)
    with pytest.raises(ValueError, match="prompt 0 of the batch is empty"):
        check_prompt_lengths([[]], max_new_tokens=1, max_model_len=24)
    check_prompt_lengths([[1] * 16], max_new_tokens=8, max_model_len=24)  # exactly fits


def _named(sizes):
    return [(name, torch.zeros(n, dtype=torch.float32)) for name, n in sizes]


def test_layer_keys():
    assert layer_key("model.layers.12.self_attn.q_proj.weight") == "model.layers.12"
    assert layer_key("model.embed_tokens.weight") == "model.embed_tokens"
    assert layer_key("lm_head.weight") == "lm_head"


def test_buckets_are_bounded_and_never_split_a_layer():
    # 4-byte floats: each layer has q, k (16 B each) and up (32 B): 64 B per layer
    weights = _named([("model.embed_tokens.weight", 8)])
    for i in range(4):
        weights += _named([(f"model.layers.{i}.self_attn.q_proj.weight", 4), (f"model.layers.{i}.self_attn.k_proj.weight", 4), (f"model.layers.{i}.mlp.up_proj.weight", 8)])
    weights += _named([("model.norm.weight", 2), ("lm_head.weight", 8)])
    groups = list(buckets(iter(weights), max_bytes=100))
    assert [n for g in groups for n, _ in g] == [n for n, _ in weights]  # order kept, nothing lost
    for g in groups:  # at most the bucket size plus one layer
        assert sum(t.nbytes for _, t in g) <= 100 + 64
    keys_per_bucket = [{layer_key(n) for n, _ in g} for g in groups]
    for a in range(len(keys_per_bucket)):
        for b in range(a + 1, len(keys_per_bucket)):
            assert not keys_per_bucket[a] & keys_per_bucket[b], "a layer was split across buckets"
    assert len(groups) > 1


def test_buckets_reject_a_layer_that_comes_back():
    weights = _named([("model.layers.0.a.weight", 64), ("model.layers.1.a.weight", 64), ("model.layers.0.b.weight", 4)])
    with pytest.raises(ValueError, match="model.layers.0.b.weight.*arrives after other tensors of 'model.layers.0'"):
        list(buckets(iter(weights), max_bytes=100))
    # within one bucket the order does not matter
    assert len(list(buckets(iter(weights), max_bytes=10_000))) == 1
