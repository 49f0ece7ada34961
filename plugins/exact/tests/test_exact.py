"""Exact mode (issue 51, rl_exact): the canonical per-sequence forward against plain torch, the hf rollout reporting it,
the Plan resolving it (and refusing rollout.exact without it), the check. End-to-end runs: test_exact_runs.py; the gap
metrics and the bound (rl-rollout-correction's): plugins/rollout_correction/tests/test_mismatch.py; seeded sampling and
trainer.deterministic (rl-core's): tests/rollout/test_mismatch.py."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
from rl_core.backends import SamplingParams, WorkerContext
from rl_core.config.load import load_config
from rl_core.config.schema import DataConfig, ModelConfig, RolloutConfig, RunConfig
from rl_core.plan.resolver import resolve
from rl_core.plugins import get_registry
from rl_core.rollout.hf import HFRolloutEngine
from rl_core_testing.rollout_conformance import prompt_batch, reference_model
from rl_core_testing.tiny_run import write_tiny_run
from rl_exact.checks import exact_problems
from rl_exact.forward import sequence_log_probs

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
    got, ent = sequence_log_probs(model, ids, mask, resp, temperature=0.7, with_entropy=True)
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
    alone, _ = sequence_log_probs(model, ids, mask, resp)
    # the same row with more left padding, more right padding and other rows around it
    other, omask, oresp = _rows(model, [(9, 8), (4, 3), (2, 1)], P=10, R=9, seed=1)
    other[1], omask[1] = 0, 0
    other[1, 6:10], other[1, 10:13] = ids[0, 2:6], ids[0, 6:9]
    omask[1, 6:13] = 1
    crowd, _ = sequence_log_probs(model, other, omask, other[:, 10:])
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
        want, _ = sequence_log_probs(bf16, ids, mask, resp)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got, _ = sequence_log_probs(fp32, ids, mask, resp, compute_dtype=torch.bfloat16)
    assert torch.equal(got.detach(), want)
    got.sum().backward()
    grads = [p.grad for p in fp32.parameters()]
    assert all(g is not None and g.dtype == torch.float32 for g in grads) and any(g.abs().sum() > 0 for g in grads)


def _engine(model_dir, **rollout):
    cfg = RunConfig(model=ModelConfig(path=str(model_dir), dtype="bfloat16"), data=DataConfig(max_prompt_length=32), rollout=RolloutConfig(**rollout))
    return HFRolloutEngine(cfg, WorkerContext(log_prob_forward=sequence_log_probs if cfg.rollout.exact else None))


def test_hf_rollout_exact_reports_the_canonical_log_probs(model_dir):
    params = SamplingParams(n=2, temperature=0.9, max_new_tokens=6, seed=3, logprobs=True)
    batch = prompt_batch(model_dir)
    plain = _engine(model_dir).generate(batch, params)
    eng = _engine(model_dir, exact=True)
    out = eng.generate(batch, params)
    assert torch.equal(out["responses"], plain["responses"])  # the same tokens: exact mode only changes the reported log-probs
    want, _ = sequence_log_probs(eng.model, out["input_ids"], out["attention_mask"], out["responses"], temperature=0.9)
    m = out["response_mask"].bool()
    assert torch.equal(out["rollout_log_probs"][m], want[m]) and (out["rollout_log_probs"][~m] == 0).all()
    gap = (plain["rollout_log_probs"] - out["rollout_log_probs"])[m].abs()
    assert gap.max() < 0.1  # the decode loop's own log-probs: the same to bf16 rounding, not bit for bit
    eng.context = WorkerContext()  # an engine built without the Plan's forward: a clear error, not the decode loop's log-probs
    with pytest.raises(RuntimeError, match="pip install rl-exact"):
        eng.generate(batch, params)


def test_the_plan_loads_the_forward_once_and_pickles(tmp_path):
    plan, problems = resolve(load_config(write_tiny_run(tmp_path, **{"rollout.exact": True})), get_registry())
    assert plan is not None, [p.render() for p in problems]
    card = get_registry().get("log_prob_forward", "exact")
    assert plan.log_prob_forward is sequence_log_probs and card.provider.distribution == "rl-exact"
    assert pickle.loads(pickle.dumps(plan)).log_prob_forward is sequence_log_probs  # to worker processes, by reference


def test_exact_check_refuses_what_cannot_be_exact():
    reg = get_registry()
    assert exact_problems(RunConfig(), reg) == []
    assert exact_problems(RunConfig(rollout=RolloutConfig(exact=True)), reg) == []
    cfg = load_config(overrides=["rollout.exact=true", "rollout.name=vllm", "rollout.calculate_log_probs=false", "rollout.multi_turn.enable=true",
                                 "model.lora_rank=8", "train.name=megatron", "model.compile=true"])
    keys = {p.key for p in exact_problems(cfg, reg)}
    stale = ["rollout.exact=true", "rollout.n_gpus_per_node=1", "async.max_staleness=1"]
    assert [p.key for p in exact_problems(load_config(overrides=stale), reg)] == ["async.max_staleness"]
    assert exact_problems(load_config(overrides=stale + ["rollout.mismatch.max_abs_diff=5"]), reg) == []
    installed = {kind: reg.cards[kind] for kind in ("rollout", "train")}  # an uninstalled backend is the resolver's to report
    named = {k for k, kind, name in (("rollout.name", "rollout", "vllm"), ("train.name", "train", "megatron")) if name in installed[kind]}
    assert keys == named | {"rollout.calculate_log_probs", "model.lora_rank", "rollout.multi_turn.enable", "model.compile"}
