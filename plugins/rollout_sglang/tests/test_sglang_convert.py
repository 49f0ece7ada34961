"""Request building, answer parsing, stop strings, padding and buckets: pure functions, no engine."""

from __future__ import annotations

import logging

import pytest
import torch
from rl_core.backends import SamplingParams
from rl_core.batch import Batch
from rl_rollout_sglang.convert import (
    EMPTY_META_KEY,
    PromptLengthError,
    Sample,
    build_rollout_batch,
    check_prompt_lengths,
    cut_at_stop,
    parse_output,
    request_seeds,
    sampling_params,
    unpadded_prompts,
)
from rl_rollout_sglang.weights import buckets, check_tensor

PAD = 0


def _batch() -> Batch:
    ids = torch.tensor([[PAD, PAD, 5, 6], [7, 8, 9, 10]])
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    return Batch({"input_ids": ids, "attention_mask": mask, "index": torch.tensor([0, 1])}, {"uid": ["a", "b"]}, {"step": 3})


def test_sampling_params_mapping():
    assert sampling_params(SamplingParams(max_new_tokens=5, temperature=0.7, top_p=0.9, top_k=20), 11) == {
        "max_new_tokens": 5, "temperature": 0.7, "top_p": 0.9, "top_k": 20, "sampling_seed": 11,
    }
    # top_k <= 0 is off (not sent); no seed, no sampling_seed
    assert sampling_params(SamplingParams(max_new_tokens=3, temperature=1.0, top_k=-1), None) == {"max_new_tokens": 3, "temperature": 1.0, "top_p": 1.0}
    # greedy, or temperature 0: temperature 0 only (SGLang decodes argmax), never a seed
    for p in (SamplingParams(max_new_tokens=2, greedy=True, temperature=0.5, top_k=3), SamplingParams(max_new_tokens=2, temperature=0.0)):
        assert sampling_params(p, 9) == {"max_new_tokens": 2, "temperature": 0.0}


def test_request_seeds_are_distinct_per_sample():
    assert request_seeds(2, 3, 100) == [100, 101, 102, 103, 104, 105]
    assert request_seeds(2, 1, None) == [None, None]


def test_parse_output_in_process_and_server_shapes():
    meta = {"output_token_logprobs": [(-0.5, 11, None), (-0.25, 2, None)], "finish_reason": {"type": "stop", "matched": 2}}
    s = parse_output({"output_ids": [11, 2], "meta_info": meta}, want_log_probs=True)
    assert s == Sample([11, 2], [-0.5, -0.25], "stop")
    # a server with a tokenizer answers text: ids come from the log-prob entries
    s = parse_output({"text": "ab", "meta_info": {**meta, "finish_reason": {"type": "length", "length": 2}}}, want_log_probs=False)
    assert s == Sample([11, 2], None, "length")
    with pytest.raises(RuntimeError, match="no output_token_logprobs"):
        parse_output({"output_ids": [1], "meta_info": {}}, want_log_probs=True)
    with pytest.raises(RuntimeError, match="no output token ids"):
        parse_output({"text": "x", "meta_info": {}}, want_log_probs=False)


def test_cut_at_stop_keeps_the_completing_token():
    vocab = {1: "a", 2: "b", 3: "c", 4: "d", 5: "e"}

    def decode(ids):
        return "".join(vocab[i] for i in ids)

    s = Sample([1, 2, 3, 4, 5], [-1.0, -2.0, -3.0, -4.0, -5.0], "length")
    assert cut_at_stop(s, ("cd",), decode) == Sample([1, 2, 3, 4], [-1.0, -2.0, -3.0, -4.0], "stop")
    assert cut_at_stop(s, ("zz", "b"), decode) == Sample([1, 2], [-1.0, -2.0], "stop")  # the earliest stop wins
    assert cut_at_stop(s, ("zz",), decode) is s
    assert cut_at_stop(s, (), decode) is s


def test_binding_names_sglang_and_its_settings(caplog):
    """The shared conversion (rl_core.rollout.samples, tested there) speaks of SGLang and its settings here."""
    b = _batch()
    assert unpadded_prompts(b["input_ids"], b["attention_mask"]) == [[5, 6], [7, 8, 9, 10]]
    with caplog.at_level(logging.WARNING):
        out = build_rollout_batch(b, [Sample([11]), Sample([], None, "abort"), Sample([15]), Sample([16])], SamplingParams(n=2, max_new_tokens=2), PAD)
    assert out["responses"][:, 0].tolist() == [11, PAD, 15, 16] and out.meta[EMPTY_META_KEY] == 1
    assert "SGLang returned 1 empty generation(s)" in caplog.text
    with pytest.raises(ValueError, match="SGLang returned 3 samples for 2 prompts x n=2 = 4"):
        build_rollout_batch(b, [Sample([1])] * 3, SamplingParams(n=2, max_new_tokens=2), PAD)
    with pytest.raises(PromptLengthError) as err:
        check_prompt_lengths([[1] * 20], max_new_tokens=8, context_len=24, max_prompt_length=None)
    assert str(err.value).startswith(
        "prompt 0 of the batch has 20 tokens; with max_new_tokens=8 it needs 28 positions, more than the SGLang engine's context length 24; "
        "raise rollout.engine_kwargs.context_length"
    )
    with pytest.raises(PromptLengthError, match="data.max_prompt_length=32"):
        check_prompt_lengths([[1] * 40], max_new_tokens=4, context_len=1000, max_prompt_length=32)


def test_buckets_are_bounded_and_keep_order():
    weights = [(f"w{i}", torch.zeros(n, dtype=torch.float32)) for i, n in enumerate([4, 4, 8, 2, 30, 1])]  # bytes: 16 16 32 8 120 4
    groups = list(buckets(iter(weights), max_bytes=40))
    assert [[n for n, _ in g] for g in groups] == [["w0", "w1"], ["w2", "w3"], ["w4"], ["w5"]]
    assert [n for g in groups for n, _ in g] == [n for n, _ in weights]
    with pytest.raises(ValueError, match="must be positive"):
        list(buckets(iter(weights), 0))


def test_check_tensor_names_and_shapes():
    shapes = {"model.norm.weight": (4,), "lm_head.weight": (8, 4)}
    check_tensor(shapes, "model.norm.weight", torch.zeros(4))
    check_tensor(None, "anything", torch.zeros(1))  # unknown model: nothing checked
    with pytest.raises(ValueError, match="unexpected weight 'model.layers.9.x'"):
        check_tensor(shapes, "model.layers.9.x", torch.zeros(1))
    with pytest.raises(ValueError, match=r"'lm_head.weight' has shape \(4, 8\) but the rollout model's is \(8, 4\)"):
        check_tensor(shapes, "lm_head.weight", torch.zeros(4, 8))
