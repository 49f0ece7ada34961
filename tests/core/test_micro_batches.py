"""Token-budget micro-batches (actor.use_dynamic_bsz) and chunked log-probs in the fsdp engine: the same update."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest
import torch
from rl_core.backends import WorkerContext
from rl_core.train_engine.micro_batches import TokenBudgetError, token_budget_groups
from rl_core_testing.adam_weights import assert_adam_weights_close, zero_grad_in_exact_arithmetic
from rl_core_testing.distributed import run_distributed
from rl_core_testing.train_conformance import default_config, make_step_batch, rank_shard, single_rank_order

rl_train_fsdp = pytest.importorskip("rl_train_fsdp.engine", reason="needs the rl-train-fsdp plugin installed (pip install -e plugins/train_fsdp)")

pytestmark = pytest.mark.usefixtures("one_thread")
build_engine = rl_train_fsdp.build_engine


def test_groups_fill_the_budget_in_order():
    assert token_budget_groups([3, 4, 2, 5, 1], 7) == [[0, 1], [2, 3], [4]]
    assert token_budget_groups(torch.tensor([7, 7, 1]), 7) == [[0], [1], [2]]
    assert token_budget_groups([1] * 5, 100) == [[0, 1, 2, 3, 4]]
    assert token_budget_groups([], 4) == []


def test_a_sequence_over_the_budget_is_a_clear_error():
    with pytest.raises(TokenBudgetError, match=r"actor.ppo_max_token_len_per_gpu=5 .*\(6 tokens"):
        token_budget_groups([2, 6], 5)


@pytest.fixture(scope="module")
def model_dir(tiny_model_dir):
    return tiny_model_dir("qwen2")


@pytest.fixture(scope="module")
def step(model_dir):
    return make_step_batch(model_dir)


def _cfg(model_dir, actor=None, **model):
    cfg = default_config(model_dir)
    if model:
        cfg = attrs.evolve(cfg, model=attrs.evolve(cfg.model, **model))
    if actor:
        cfg = attrs.evolve(cfg, actor=attrs.evolve(cfg.actor, **actor))
    return cfg


def _weights(engine):
    return {n: t.detach().clone() for n, t in engine.named_weights()}


def _record_grads(engine):
    """Keep the gradients every optimizer step sees (Adam's step hides small gradient differences in the weights)."""
    seen = []
    names = {id(p): n for n, p in engine.model.named_parameters()}

    def before_step(optimizer, args, kwargs):
        seen.append({names[id(p)]: p.grad.detach().clone() for p in engine.model.parameters() if p.grad is not None})

    engine.optimizer.register_step_pre_hook(before_step)
    return seen


def _same_update(a, b, shard):
    ga, gb = _record_grads(a), _record_grads(b)
    ma, mb = a.update(shard), b.update(shard)
    assert ma["loss"] == pytest.approx(mb["loss"], rel=1e-5, abs=1e-7)
    assert ma["grad_norm"] == pytest.approx(mb["grad_norm"], rel=1e-5)
    assert len(ga) == len(gb) > 1 and ga[0].keys() == gb[0].keys()
    for name in ga[0]:  # the first optimizer step: both engines hold the same weights
        torch.testing.assert_close(gb[0][name], ga[0][name], atol=1e-6, rtol=1e-4, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean"])
def test_token_budget_micro_batches_give_the_same_update(model_dir, step, mode):
    shard = single_rank_order(step, 1, 2)
    lengths = shard.tensors["attention_mask"].sum(-1)
    budget = int(lengths.max()) + 3  # mostly one or two rows per micro-batch, unevenly
    fixed = build_engine("actor", _cfg(model_dir, actor=dict(ppo_micro_batch_size_per_gpu=2, loss_agg_mode=mode)), WorkerContext())
    dyn = build_engine(
        "actor", _cfg(model_dir, actor=dict(use_dynamic_bsz=True, ppo_max_token_len_per_gpu=budget, loss_agg_mode=mode)), WorkerContext()
    )
    sizes = [len(g) for g in token_budget_groups(shard.tensors["attention_mask"][:4].sum(-1), budget)]
    assert len(set(sizes)) > 1 or sizes != [2, 2]  # really another split than the fixed one
    mask = shard.tensors["response_mask"].bool()
    a, b = fixed.compute_log_prob(shard, with_entropy=True), dyn.compute_log_prob(shard, with_entropy=True)
    for key in ("log_probs", "entropy"):
        torch.testing.assert_close(b[key][mask], a[key][mask], atol=1e-5, rtol=1e-5)
    _same_update(fixed, dyn, shard)


def test_config_keys_are_validated(tmp_path, capsys):
    from rl_core.cli.main import main

    data = Path(__file__).resolve().parents[1] / "fixtures" / "data" / "tiny_gsm8k.jsonl"
    args = ["model.path=Qwen/Qwen2.5-0.5B", f"data.train_files=[{data}]", "trainer.device=cpu", f"trainer.output_dir={tmp_path}",
            "actor.use_dynamic_bsz=true", "actor.ppo_max_token_len_per_gpu=0", "model.logprob_chunk_size=-1"]
    assert main(["check", *args]) == 1
    err = capsys.readouterr().err
    assert "actor.ppo_max_token_len_per_gpu: 0 is out of range" in err
    assert "model.logprob_chunk_size: -1 is out of range" in err


def test_chunked_log_probs_give_the_same_log_probs_and_update(model_dir, step):
    shard = single_rank_order(step, 1, 2)
    plain = build_engine("actor", _cfg(model_dir, logprob_chunk_size=0), WorkerContext())
    chunked = build_engine("actor", _cfg(model_dir, logprob_chunk_size=3), WorkerContext())
    mask = shard.tensors["response_mask"].bool()
    a = plain.compute_log_prob(shard, with_entropy=True)
    b = chunked.compute_log_prob(shard, with_entropy=True)
    for key in ("log_probs", "entropy"):
        torch.testing.assert_close(b[key][mask], a[key][mask], atol=1e-5, rtol=1e-5)
    _same_update(plain, chunked, shard)


def _dyn_sharded(rank, world, model_dir, budget):
    step = make_step_batch(model_dir)
    cfg = _cfg(model_dir, actor=dict(use_dynamic_bsz=True, ppo_max_token_len_per_gpu=budget), logprob_chunk_size=4)
    actor = build_engine("actor", cfg, WorkerContext(rank=rank, world_size=world))
    shard = rank_shard(step, rank, world)
    lp = actor.compute_log_prob(shard)["log_probs"]
    metrics = actor.update(shard)
    return {"lp": lp, "metrics": metrics, "weights": {n: t.clone() for n, t in actor.named_weights()}}


@pytest.mark.dist
def test_token_budget_sharded_ranks_with_different_micro_batch_counts(model_dir, step):
    """Two FSDP ranks whose token budgets give them different numbers of micro-batches: the global update."""
    world, n_mini = 2, 2
    lengths = step.tensors["attention_mask"].sum(-1)

    def counts(budget):
        out = []
        for r in range(world):
            rows = rank_shard(step, r, world).tensors["attention_mask"].sum(-1)
            per = len(rows) // n_mini
            out.append([len(token_budget_groups(rows[k * per : (k + 1) * per], budget)) for k in range(n_mini)])
        return out

    # a budget that gives the two ranks different micro-batch counts, so the repeat path really runs
    budget = next(b for b in range(int(lengths.max()), int(lengths.sum())) if counts(b)[0] != counts(b)[1])
    outs = run_distributed(_dyn_sharded, world, model_dir, budget)
    ref = build_engine("actor", _cfg(model_dir), WorkerContext())
    mask = step.tensors["response_mask"].bool()
    lp = torch.cat([o["lp"] for o in outs])
    torch.testing.assert_close(lp[mask], ref.compute_log_prob(step)["log_probs"][mask], atol=1e-5, rtol=1e-5)
    initial = _weights(ref)
    m = ref.update(single_rank_order(step, world, n_mini))
    w = _weights(ref)
    for o in outs:
        assert o["metrics"]["loss"] == pytest.approx(m["loss"], rel=1e-5, abs=1e-7)
        assert o["metrics"]["grad_norm"] == pytest.approx(m["grad_norm"], rel=1e-4)
        for name in w:
            if zero_grad_in_exact_arithmetic(name):
                continue
            assert_adam_weights_close(o["weights"][name], w[name], initial[name], name=name, atol=1e-6, rtol=1e-5)
