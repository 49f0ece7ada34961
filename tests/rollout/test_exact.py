"""Exact on-policy training (issue 51, rl_core.rollout.exact): the canonical per-sequence forward, the gap metrics and
bound, the check, seeded sampling and deterministic mode. End-to-end runs: tests/e2e/test_exact_runs.py."""

from __future__ import annotations

import copy
import os

import pytest
import torch
from rl_core.backends import SamplingParams, WorkerContext
from rl_core.config.load import load_config
from rl_core.config.schema import DataConfig, ModelConfig, RolloutConfig, RunConfig
from rl_core.plugins import get_registry
from rl_core.rollout import exact
from rl_core.rollout.exact_checks import exact_problems
from rl_core.rollout.hf import HFRolloutEngine
from rl_core.trainer.tracking import key_metrics
from rl_core_testing.rollout_conformance import prompt_batch, reference_model

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def model_dir(tiny_model_dir):
    return tiny_model_dir("llama")


def _rows(model, lengths, P=6, R=5, pad=0, extra_right=0, seed=0):
    """Left-padded prompts of ``lengths[i] = (prompt, response)`` real tokens, responses right-padded."""
    g = torch.Generator().manual_seed(seed)
    V = model.config.vocab_size
    b = len(lengths)
    ids = torch.full((b, P + R + extra_right), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, (p, r) in enumerate(lengths):
        ids[i, P - p : P] = torch.randint(1, V, (p,), generator=g)
        ids[i, P : P + r] = torch.randint(1, V, (r,), generator=g)
        mask[i, P - p : P + r] = 1
    return ids, mask, ids[:, P:]


def test_sequence_log_probs_match_a_plain_forward(model_dir):
    model = reference_model(model_dir)
    ids, mask, resp = _rows(model, [(3, 4), (6, 5), (1, 2)])
    got, ent = exact.sequence_log_probs(model, ids, mask, resp, temperature=0.7, with_entropy=True)
    for i in range(len(ids)):  # reference: the row's real tokens through the model, full logits, plain torch
        real = ids[i][mask[i].bool()]
        n = int(mask[i, 6:].sum())
        with torch.no_grad():
            logits = model(real.unsqueeze(0)).logits[0].float() / 0.7
        logp = torch.log_softmax(logits[len(real) - n - 1 : len(real) - 1], -1)
        want = logp.gather(-1, real[-n:].unsqueeze(-1)).squeeze(-1)
        torch.testing.assert_close(got[i, :n], want, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(ent[i, :n], -(logp.exp() * logp).sum(-1), atol=1e-5, rtol=1e-5)
        assert (got[i, n:] == 0).all() and (ent[i, n:] == 0).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_padding_and_batch_neighbours_do_not_change_a_bit(model_dir, dtype):
    model = reference_model(model_dir).to(dtype)
    ids, mask, resp = _rows(model, [(4, 3)], P=6, R=5)
    alone, _ = exact.sequence_log_probs(model, ids, mask, resp)
    # the same row with more left padding, more right padding and other rows around it
    other, omask, oresp = _rows(model, [(9, 8), (4, 3), (2, 1)], P=10, R=9, seed=1)
    other[1], omask[1] = 0, 0
    other[1, 6:10], other[1, 10:13] = ids[0, 2:6], ids[0, 6:9]
    omask[1, 6:13] = 1
    crowd, _ = exact.sequence_log_probs(model, other, omask, other[:, 10:])
    assert torch.equal(crowd[1, :3], alone[0, :3])
    assert alone[0, :3].abs().min() > 0


def test_cast_weights_equal_a_low_precision_copy_and_keep_gradients(model_dir):
    """The trainer's unsharded bf16 path (float32 weights cast, autocast off) is the rollout's bf16 model, bit for bit."""
    fp32 = reference_model(model_dir)
    bf16 = copy.deepcopy(fp32)
    for p in bf16.parameters():  # as the rollout loads in bf16 / receives a weight sync: parameters only, buffers as loaded
        p.data = p.data.to(torch.bfloat16)
    ids, mask, resp = _rows(fp32, [(3, 4), (5, 2)])
    with torch.no_grad():
        want, _ = exact.sequence_log_probs(bf16, ids, mask, resp)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got, _ = exact.sequence_log_probs(fp32, ids, mask, resp, compute_dtype=torch.bfloat16)
    assert torch.equal(got.detach(), want)
    got.sum().backward()
    grads = [p.grad for p in fp32.parameters()]
    assert all(g is not None and g.dtype == torch.float32 for g in grads) and any(g.abs().sum() > 0 for g in grads)


def _engine(model_dir, **rollout):
    cfg = RunConfig(model=ModelConfig(path=str(model_dir), dtype="bfloat16"), data=DataConfig(max_prompt_length=32), rollout=RolloutConfig(**rollout))
    return HFRolloutEngine(cfg, WorkerContext())


def test_hf_rollout_exact_reports_the_canonical_log_probs(model_dir):
    params = SamplingParams(n=2, temperature=0.9, max_new_tokens=6, seed=3, logprobs=True)
    batch = prompt_batch(model_dir)
    plain = _engine(model_dir).generate(batch, params)
    eng = _engine(model_dir, exact=True)
    out = eng.generate(batch, params)
    assert torch.equal(out["responses"], plain["responses"])  # the same tokens: exact mode only changes the reported log-probs
    want, _ = exact.sequence_log_probs(eng.model, out["input_ids"], out["attention_mask"], out["responses"], temperature=0.9)
    m = out["response_mask"].bool()
    assert torch.equal(out["rollout_log_probs"][m], want[m]) and (out["rollout_log_probs"][~m] == 0).all()
    gap = (plain["rollout_log_probs"] - out["rollout_log_probs"])[m].abs()
    assert gap.max() < 0.1  # the decode loop's own log-probs: the same to bf16 rounding, not bit for bit


def test_hf_sampling_is_seeded_not_the_global_rng(model_dir):
    """A test that fails if the rollout's sampling read an unseeded (global) RNG: same seed, disturbed global state."""
    eng = _engine(model_dir)
    params = SamplingParams(n=2, temperature=1.0, max_new_tokens=6, seed=11, logprobs=True)
    batch = prompt_batch(model_dir)
    torch.manual_seed(0)
    a = eng.generate(batch, params)
    torch.manual_seed(12345)
    torch.rand(1000)
    b = eng.generate(batch, params)
    assert torch.equal(a["responses"], b["responses"]) and torch.equal(a["rollout_log_probs"], b["rollout_log_probs"])
    c = eng.generate(batch, SamplingParams(n=2, temperature=1.0, max_new_tokens=6, seed=12, logprobs=True))
    assert not torch.equal(a["responses"], c["responses"])  # the seed is what decides


def test_gap_metrics_and_bound():
    trainer = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.25, 0.0]])
    rollout = torch.tensor([[-1.0, -2.5, -3.0], [-0.5, -0.05, -9.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    assert exact.gap_metrics(trainer, rollout, mask, 0.1) == {exact.GAP_FRAC: pytest.approx(2 / 5)}
    exact.check_gap(trainer, rollout, mask, bound=None, step=1, backend="hf")  # no bound: never
    exact.check_gap(trainer, rollout, mask, bound=0.5, step=1, backend="hf")  # the 9.0 is masked
    with pytest.raises(exact.MismatchError) as err:
        exact.check_gap(trainer, rollout, mask, bound=0.3, step=4, backend="vllm")
    msg = str(err.value)
    assert "step 4" in msg and "(vllm)" in msg and "row 0, response position 1" in msg and "0.5 >" in msg and "-2.5" in msg
    nan = rollout.clone()
    nan[1, 0] = float("nan")
    with pytest.raises(exact.MismatchError, match="row 1, response position 0"):
        exact.check_gap(trainer, nan, mask, bound=1.0, step=1, backend="hf")


def test_bound_defaults_to_zero_in_exact_mode_only():
    assert exact.bound_of(load_config()) is None
    assert exact.bound_of(load_config(overrides=["rollout.exact=true"])) == 0.0
    assert exact.bound_of(load_config(overrides=["rollout.exact=true", "rollout.mismatch.max_abs_diff=0.2"])) == 0.2
    assert exact.bound_of(load_config(overrides=["rollout.mismatch.max_abs_diff=0"])) == 0.0


def test_log_probs_are_on_by_default_and_on_the_console_line():
    assert RolloutConfig().calculate_log_probs is True
    shown = key_metrics({"rollout_corr/log_prob_abs_diff_max": 0.25, "rollout_corr/kl": 0.5, "rollout_corr/log_prob_abs_diff_mean": 0.1})
    assert shown == {"dlogp": 0.25}  # the gap; the mismatch's KL estimate is not the policy's kl


def test_exact_check_refuses_what_cannot_be_exact():
    assert exact_problems(RunConfig()) == []
    assert exact_problems(RunConfig(rollout=RolloutConfig(exact=True))) == []
    cfg = load_config(overrides=["rollout.exact=true", "rollout.name=vllm", "rollout.calculate_log_probs=false", "rollout.multi_turn.enable=true",
                                 "model.lora_rank=8", "train.name=megatron", "model.compile=true"])
    keys = {p.key for p in exact_problems(cfg)}
    stale = ["rollout.exact=true", "rollout.n_gpus_per_node=1", "async.max_staleness=1"]
    assert [p.key for p in exact_problems(load_config(overrides=stale))] == ["async.max_staleness"]
    assert exact_problems(load_config(overrides=stale + ["rollout.mismatch.max_abs_diff=5"])) == []
    installed = {kind: get_registry().cards[kind] for kind in ("rollout", "train")}  # an uninstalled backend is the resolver's to report
    named = {k for k, kind, name in (("rollout.name", "rollout", "vllm"), ("train.name", "train", "megatron")) if name in installed[kind]}
    assert keys == named | {"rollout.calculate_log_probs", "model.lora_rank", "rollout.multi_turn.enable", "model.compile"}


def test_apply_determinism(monkeypatch):
    was = torch.are_deterministic_algorithms_enabled()
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    try:
        assert exact.apply_determinism(RunConfig()) is False and "CUBLAS_WORKSPACE_CONFIG" not in os.environ
        assert exact.apply_determinism(load_config(overrides=["trainer.deterministic=true"])) is True
        assert torch.are_deterministic_algorithms_enabled() and os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
        assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
    finally:
        torch.use_deterministic_algorithms(was)
        torch.backends.cudnn.deterministic = False
