"""rl_rollout_vllm.fast_path (issue 48): batch seeding restores the caller's RNG and gives the same draws for the
same seed; log-probs read from vLLM's flat container equal the per-token dict lookups; seed_mode is checked.
Pure: no engine (the engine's seeded generation is the conformance suite's test_seed_determinism)."""

from __future__ import annotations

import types

import pytest
import torch
from rl_core.config.schema import RolloutConfig, RunConfig
from rl_rollout_vllm import fast_path
from rl_rollout_vllm.plugin import check_engine_kwargs


def test_batch_seed_gives_the_same_draws_and_restores_the_callers_stream():
    torch.manual_seed(123)
    expected_next = torch.rand(3)  # what the caller's stream gives next, undisturbed
    torch.manual_seed(123)
    with fast_path.batch_seed(7, torch.device("cpu")):
        a = torch.rand(5)
    assert torch.equal(torch.rand(3), expected_next), "the caller's RNG stream moved"
    with fast_path.batch_seed(7, torch.device("cpu")):
        b = torch.rand(5)
    with fast_path.batch_seed(8, torch.device("cpu")):
        c = torch.rand(5)
    assert torch.equal(a, b) and not torch.equal(a, c)
    torch.manual_seed(5)
    first = torch.rand(2)
    torch.manual_seed(5)
    with fast_path.batch_seed(None, torch.device("cpu")):  # no seed: nothing touched
        assert torch.equal(torch.rand(2), first)


class _Logprob:
    def __init__(self, value):
        self.logprob = value


def test_flat_and_dict_log_probs_agree():
    tokens = [5, 9, 5, 2]
    values = [-0.5, -1.25, -0.125, -3.0]
    as_dicts = types.SimpleNamespace(token_ids=tokens, logprobs=[{t: _Logprob(v)} for t, v in zip(tokens, values)])
    flat = types.SimpleNamespace(token_ids=list(tokens), logprobs=list(values))
    comp_flat = types.SimpleNamespace(token_ids=tokens, logprobs=flat)
    assert fast_path.sampled_log_probs(as_dicts) == values
    assert fast_path.sampled_log_probs(comp_flat) == values
    with pytest.raises(RuntimeError, match="no log-probs"):
        fast_path.sampled_log_probs(types.SimpleNamespace(token_ids=tokens, logprobs=None))


def test_seed_mode_is_checked():
    assert fast_path.seed_mode({}) == "batch"
    extra = {"seed_mode": "request", "max_num_seqs": 8}
    assert fast_path.seed_mode(extra) == "request" and extra == {"max_num_seqs": 8}  # taken out before vllm.LLM
    with pytest.raises(ValueError, match="seed_mode"):
        fast_path.seed_mode({"seed_mode": "sample"})
    problems = check_engine_kwargs(RunConfig(rollout=RolloutConfig(name="vllm", engine_kwargs={"seed_mode": "sample"})))
    assert [p.key for p in problems] == ["rollout.engine_kwargs.seed_mode"]
    assert check_engine_kwargs(RunConfig(rollout=RolloutConfig(name="vllm", engine_kwargs={"seed_mode": "request"}))) == []
