"""2-step GRPO and PPO jobs on a tiny random model with 1 and 2 worker processes."""

from __future__ import annotations

import math

import attrs
import pytest
import torch
from rl_core.config.load import load_config
from rl_core.plan.resolver import resolve
from rl_core.trainer.loop import Trainer
from safetensors.torch import load_file

from tests.e2e.helpers import read_metrics, write_tiny_run

pytest.importorskip("rl_train_fsdp", reason="needs the rl-train-fsdp plugin (pip install -e plugins/train_fsdp)")


def _load_weights(folder) -> dict[str, torch.Tensor]:
    out = {}
    for f in sorted(folder.glob("*.safetensors")):
        out.update(load_file(str(f)))
    return out


def _rollout_matches_actor(trainer: Trainer) -> float:
    """Max |rollout log-prob - actor log-prob| of sampled tokens after the last sync."""
    prompts = trainer.train_loader.next_batch()
    params = attrs.evolve(trainer.sampling(step=999), logprobs=True)
    gen = trainer.generate(prompts, params)
    parts = trainer._train_call("compute_log_prob", gen, params.temperature, False)
    actor = torch.cat([p["log_probs"] for p in parts])
    mask = gen["response_mask"].bool()
    return (actor[mask] - gen["rollout_log_probs"][mask]).abs().max().item()


@pytest.mark.dist
@pytest.mark.parametrize("nprocs", [1, 2])
@pytest.mark.parametrize("estimator", ["grpo", "gae"])
def test_two_step_job(tmp_path, nprocs, estimator):
    # 2 processes, GRPO: also profiler.* (rl_profiling.profiling): rank 0 records the actor's calls of step 2 only
    profiled = nprocs == 2 and estimator == "grpo"
    traces = tmp_path / "traces"
    extra = {"profiler": {"tool": "torch", "steps": [2], "actor": True, "save_path": str(traces)}} if profiled else {}
    cfg_path = write_tiny_run(tmp_path, nprocs=nprocs, estimator=estimator, **extra)
    stack, problems = resolve(load_config(cfg_path))
    assert stack is not None, [p.render() for p in problems]
    assert stack.config.critic.enable is (estimator == "gae")
    trainer = Trainer(stack, progress=False)
    try:
        trainer.fit()
        gap = _rollout_matches_actor(trainer)
    finally:
        trainer.close()
    rows = read_metrics(tmp_path / "out")
    assert [r["step"] for r in rows] == [1, 2]
    if profiled:
        written = sorted(p.relative_to(traces).as_posix() for p in traces.rglob("*") if p.is_file())
        assert written == ["step_2/actor_compute_log_prob_rank0.json", "step_2/actor_update_actor_rank0.json"] or written == [
            "step_2/actor_update_actor_rank0.json"], written  # the old-log-prob pass is skipped when on-policy
    for row in rows:
        for key in ("reward/mean", "actor/pg_loss", "actor/grad_norm", "actor/entropy", "timing_s/gen", "timing_s/update_actor", "timing_s/sync_weights", "perf/throughput_tokens_per_s", "response_length/mean"):
            assert key in row, (key, sorted(row))
            assert math.isfinite(row[key]), (key, row[key])
        if estimator == "gae":
            assert math.isfinite(row["critic/vf_loss"]) and "timing_s/values" in row
    before = _load_weights(tmp_path / "model")
    after = _load_weights(tmp_path / "out" / "hf_final")
    assert set(before) <= set(after) or set(after) <= set(before)
    changed = [k for k in before if k in after and not torch.equal(before[k], after[k])]
    assert changed, "no weight changed after two updates"
    assert gap < 1e-4, f"rollout log-probs differ from the actor's by {gap} after sync"


def test_on_policy_update_skips_the_old_log_prob_pass_with_the_same_result(tmp_path):
    """One mini-batch, one epoch: old == current, so skipping the extra forward pass changes nothing; with
    rollout.calculate_log_probs the mismatch metrics come from the update's own forward, equal to the pass's."""
    rows = {}
    for recompute in (True, False):
        # every row in the update (no zero-advantage skipping): on-policy, actor/entropy comes from the update's
        # forward, and it must cover the same rows as the old-log-prob pass's to compare
        cfg_path = write_tiny_run(
            tmp_path / str(recompute), steps=1, actor__ppo_mini_batch_size=4, actor__recompute_old_log_prob=recompute,
            actor__skip_zero_advantage_rows=False, rollout__calculate_log_probs=True,
        )
        stack, problems = resolve(load_config(cfg_path))
        assert stack is not None, [p.render() for p in problems]
        trainer = Trainer(stack, progress=False)
        try:
            trainer.fit()
        finally:
            trainer.close()
        (rows[recompute],) = read_metrics(tmp_path / str(recompute) / "out")
    assert "timing_s/old_log_prob" in rows[True] and "timing_s/old_log_prob" not in rows[False]
    for key in ("actor/pg_loss", "actor/grad_norm", "actor/entropy", "reward/mean"):
        assert rows[True][key] == pytest.approx(rows[False][key], rel=1e-5, abs=1e-7), key
    assert rows[True]["actor/pg_clipfrac"] == rows[False]["actor/pg_clipfrac"] == 0.0
    # pi_old's log-probs vs the rollout's: the same numbers from the pass and from the update's forward (the hf
    # rollout runs the same fp32 model, so the gap itself is ~0; a wrong or missing row would show in it)
    for key in ("training_log_ppl", "rollout_log_ppl", "kl", "k3_kl", "log_prob_abs_diff_mean", "log_prob_abs_diff_max", "chi2_seq"):
        assert rows[True][f"rollout_corr/{key}"] == pytest.approx(rows[False][f"rollout_corr/{key}"], rel=1e-4, abs=1e-6), key
    assert rows[False]["rollout_corr/log_prob_abs_diff_max"] < 1e-3


def test_on_policy_is_the_default_only_when_it_holds(tmp_path):
    from rl_core.trainer.loop import needs_old_log_prob_pass

    def plan(**extra):
        stack, problems = resolve(load_config(write_tiny_run(tmp_path / str(len(list(tmp_path.iterdir()))), **extra)))
        assert stack is not None, [p.render() for p in problems]
        return needs_old_log_prob_pass(stack)

    assert plan(actor__ppo_mini_batch_size=4) is False  # 4 prompts, one mini-batch, one epoch
    assert plan(actor__ppo_mini_batch_size=2) is True  # two optimizer steps: the second is off-policy
    assert plan(actor__ppo_mini_batch_size=4, actor__ppo_epochs=2) is True
    # the rollout's log-probs are asked for to compare with pi_old's (rollout_corr/*): the update's forward gives them
    assert plan(actor__ppo_mini_batch_size=4, rollout__calculate_log_probs=True) is False
    # importance weights alone: the on-policy update weights each row from its own forward (rollout_correction.in_update)
    assert plan(actor__ppo_mini_batch_size=4, rollout__calculate_log_probs=True, algorithm__rollout_correction__rollout_is="token") is False
    # rejection or batch-normalised weights need them before the update: computed first
    rc = "algorithm__rollout_correction__"
    assert plan(actor__ppo_mini_batch_size=4, rollout__calculate_log_probs=True, **{rc + "rollout_rs": "token_k1", rc + "rollout_rs_threshold": 2.0}) is True
    assert plan(actor__ppo_mini_batch_size=4, rollout__calculate_log_probs=True, **{rc + "rollout_is": "token", rc + "rollout_is_batch_normalize": True}) is True
    assert plan(actor__ppo_mini_batch_size=2, rollout__calculate_log_probs=True, algorithm__rollout_correction__rollout_is="token") is True
