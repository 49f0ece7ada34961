"""Batch conversion, prompt checks and weight buckets: pure functions, no engine."""

from __future__ import annotations

import logging

import pytest
import torch
from rl_core.backends import SamplingParams
from rl_core.batch import Batch
from rl_rollout_vllm.convert import EMPTY_META_KEY, PromptLengthError, Sample, build_rollout_batch, check_prompt_lengths, unpadded_prompts
from rl_rollout_vllm.weights import buckets, layer_key

PAD = 0


def test_binding_names_vllm_and_its_settings(caplog):
    """The shared conversion (rl_core.rollout.samples, tested there) speaks of vLLM and its settings here."""
    b = Batch({"input_ids": torch.tensor([[PAD, 5]]), "attention_mask": torch.tensor([[0, 1]])}, {}, {})
    assert unpadded_prompts(b["input_ids"], b["attention_mask"]) == [[5]]
    with caplog.at_level(logging.WARNING):
        out = build_rollout_batch(b, [Sample([7]), Sample([])], SamplingParams(n=2, max_new_tokens=2), PAD)
    assert out["responses"].tolist() == [[7, PAD], [PAD, PAD]] and out.meta[EMPTY_META_KEY] == 1
    assert "vLLM returned 1 empty generation(s)" in caplog.text
    with pytest.raises(ValueError, match="vLLM returned 1 samples for 1 prompts x n=2"):
        build_rollout_batch(b, [Sample([7])], SamplingParams(n=2, max_new_tokens=2), PAD)
    with pytest.raises(PromptLengthError, match="data.max_prompt_length=32"):
        check_prompt_lengths([[1] * 40], max_new_tokens=4, max_model_len=1000, max_prompt_length=32)


def test_prompt_longer_than_engine_max_model_len_names_sample_and_lengths():
    with pytest.raises(ValueError) as err:
        check_prompt_lengths([[1] * 3, [1] * 30], max_new_tokens=4, max_model_len=24)
    msg = str(err.value)
    assert "prompt 1 of the batch has 30 tokens, longer than the vLLM engine's max model length 24" in msg
    assert "raise rollout.engine_kwargs.max_model_len" in msg and isinstance(err.value, PromptLengthError)
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
