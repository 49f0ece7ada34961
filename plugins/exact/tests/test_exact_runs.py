"""Exact on-policy training end to end (issue 51, rl_exact; docs/exact.md): tiny GRPO runs on the CPU.

rollout.exact=true: the rollout's log-probs and the trainer's are equal on every token of every step (the run itself
would stop otherwise: the bound is 0 in exact mode), in bf16 and fp32, one and two processes, packed or padded, with
and without the old-log-prob pass. The default path's gap (rl-rollout-correction's):
plugins/rollout_correction/tests/test_mismatch_runs.py; trainer.deterministic (rl-core's): tests/e2e/test_deterministic_runs.py.
"""

from __future__ import annotations

import pytest
import torch
from rl_rollout_correction.mismatch import GAP_FRAC

from tests.e2e.helpers import train_tiny

pytest.importorskip("rl_train_fsdp", reason="needs the rl-train-fsdp plugin (pip install -e plugins/train_fsdp)")

pytestmark = pytest.mark.slow

GAP = ("rollout_corr/log_prob_abs_diff_max", "rollout_corr/log_prob_abs_diff_mean", "rollout_corr/kl", GAP_FRAC)
ON_POLICY = {"actor__ppo_mini_batch_size": 4}  # one mini-batch of the 4 prompts: no old-log-prob pass


def _assert_exact(rows, steps):
    assert [r["step"] for r in rows] == list(range(1, steps + 1))
    for row in rows:
        for key in GAP:
            assert row[key] == 0.0, (row["step"], key, row[key])


def test_exact_bf16_one_process_on_policy(tmp_path):
    rows = train_tiny(tmp_path, steps=3, model__dtype="bfloat16", rollout__exact=True, trainer__val_before_train=False, **ON_POLICY)
    _assert_exact(rows, 3)
    assert not any("timing_s/old_log_prob" in r for r in rows)  # the metric costs no pass: the update's own forward


def test_exact_fp32_packed(tmp_path):
    rows = train_tiny(tmp_path, steps=2, rollout__exact=True, actor__use_remove_padding=True, trainer__val_before_train=False)
    _assert_exact(rows, 2)
    assert all("timing_s/old_log_prob" in r for r in rows)  # two mini-batches: the old-log-prob pass is the compared one


@pytest.mark.dist
def test_exact_bf16_two_processes_packed(tmp_path):
    rows = train_tiny(tmp_path, nprocs=2, steps=2, model__dtype="bfloat16", rollout__exact=True, actor__use_remove_padding=True,
                      trainer__val_before_train=False)
    _assert_exact(rows, 2)


def _exact_sharded(rank, world, model_dir, budget):
    import attrs
    from rl_core.backends import WorkerContext
    from rl_core_testing.train_conformance import default_config, make_step_batch, rank_shard
    from rl_exact.forward import sequence_log_probs
    from rl_train_fsdp.engine import build_engine

    cfg = default_config(model_dir)
    cfg = attrs.evolve(cfg, rollout=attrs.evolve(cfg.rollout, exact=True),
                       actor=attrs.evolve(cfg.actor, use_dynamic_bsz=True, ppo_max_token_len_per_gpu=budget))
    actor = build_engine("actor", cfg, WorkerContext(rank=rank, world_size=world, log_prob_forward=sequence_log_probs))
    shard = rank_shard(make_step_batch(model_dir), rank, world)
    lp = actor.compute_log_prob(shard)["log_probs"]
    actor.update(shard)  # the update's forwards and backwards: a rank with fewer rows per micro-batch must not hang
    return {"lp": lp}


@pytest.mark.dist
def test_exact_sharded_ranks_with_different_rows_per_forward(tiny_model_dir):
    """Two FSDP2 ranks whose token budgets give their micro-batches different row counts: exact mode's per-sequence
    forwards run in lockstep (no hang), and each row's log-probs are the unsharded canonical ones, bit for bit."""
    from rl_core.train_engine.micro_batches import token_budget_groups
    from rl_core_testing.distributed import run_distributed
    from rl_core_testing.rollout_conformance import reference_model
    from rl_core_testing.train_conformance import make_step_batch, rank_shard
    from rl_exact.forward import sequence_log_probs

    model_dir = tiny_model_dir("qwen2")
    step = make_step_batch(model_dir)
    lengths = step.tensors["attention_mask"].sum(-1)

    def rows_per_group(budget):
        return [[len(g) for g in token_budget_groups(rank_shard(step, r, 2).tensors["attention_mask"].sum(-1), budget)] for r in range(2)]

    budget = next(b for b in range(int(lengths.max()), int(lengths.sum())) if len({tuple(c) for c in rows_per_group(b)}) > 1)
    outs = run_distributed(_exact_sharded, 2, model_dir, budget, timeout=600)
    with torch.no_grad():
        want, _ = sequence_log_probs(reference_model(model_dir), step["input_ids"], step["attention_mask"], step["responses"])
    mask = step["response_mask"].bool()
    got = torch.cat([o["lp"] for o in outs])
    assert torch.equal(got[mask], want[mask])
