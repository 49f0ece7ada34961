"""Old-log-prob passes per step on a 2-rank data-parallel run (issue 54): on-policy settings run none.

One mini-batch, one epoch: every micro-batch's forward runs before the only optimizer step, so the update's own
forward gives pi_old's log-probs. With a rollout correction of importance weights alone (token TIS here) the update
weights each row from them (rl_rollout_correction.options.in_update) instead of the loop running a separate
forward pass first. The rollout's log-probs are shifted by a fixed per-token offset so that the weights are far from
1 and some are truncated: the run without the pass must give the run with it, and a run without the correction must
differ (the weights are applied).
"""

from __future__ import annotations

import math

import pytest
import torch
from rl_core.config.load import load_config
from rl_core.placement.contract import WorkerMethod
from rl_core.plan.resolver import resolve
from rl_core.trainer.loop import Trainer, needs_old_log_prob_pass

from tests.e2e.helpers import read_metrics, write_tiny_run

pytest.importorskip("rl_train_fsdp", reason="needs the rl-train-fsdp plugin (pip install -e plugins/train_fsdp)")

ON_POLICY = dict(
    nprocs=2, steps=2, actor__ppo_mini_batch_size=4, actor__ppo_micro_batch_size_per_gpu=2, actor__skip_zero_advantage_rows=False,
    rollout__calculate_log_probs=True, trainer__torch_threads=1,
)
TIS = dict(algorithm__rollout_correction__rollout_is="token", algorithm__rollout_correction__rollout_is_threshold=1.2)


def _shift(batch) -> None:
    """A fixed per-token offset (-0.4..0.4) on the rollout's log-probs: weights exp(-offset), the larger truncated."""
    lp = batch.tensors["rollout_log_probs"]
    offset = 0.4 * torch.sin(torch.arange(lp.numel(), dtype=torch.float32)).reshape(lp.shape)
    batch.tensors["rollout_log_probs"] = lp + offset * batch.tensors["response_mask"].float()


def _run(tmp, **extra) -> tuple[list[dict], dict[str, int], bool]:
    stack, problems = resolve(load_config(write_tiny_run(tmp, **ON_POLICY, **extra)))
    assert stack is not None, [p.render() for p in problems]
    trainer = Trainer(stack, progress=False)
    calls: dict[str, int] = {}
    train_call, generate = trainer._train_call, trainer.generate

    def counted(method, batch, *args):
        name = WorkerMethod.named(method).value
        calls[name] = calls.get(name, 0) + 1
        return train_call(method, batch, *args)

    def shifted(prompts, params):
        batch = generate(prompts, params)
        _shift(batch)
        return batch

    trainer._train_call, trainer.generate = counted, shifted
    try:
        assert trainer.sizes.ranks("actor") == (2, 2)  # two data-parallel ranks
        trainer.fit()
    finally:
        trainer.close()
    return read_metrics(tmp / "out"), calls, needs_old_log_prob_pass(stack)


@pytest.mark.dist
def test_on_policy_tis_on_two_ranks_runs_no_old_log_prob_pass_and_trains_the_same(tmp_path):
    passed, pass_calls, pass_needed = _run(tmp_path / "pass", actor__recompute_old_log_prob=True, **TIS)
    inline, inline_calls, inline_needed = _run(tmp_path / "inline", **TIS)
    plain, _, _ = _run(tmp_path / "plain")
    assert pass_needed and not inline_needed
    # per step: one old-log-prob pass with it forced, none on-policy; one update each
    assert pass_calls.get("compute_log_prob") == 2 and pass_calls.get("update_actor") == 2, pass_calls
    assert "compute_log_prob" not in inline_calls and inline_calls.get("update_actor") == 2, inline_calls
    assert all("timing_s/old_log_prob" in r for r in passed) and not any("timing_s/old_log_prob" in r for r in inline)
    for a, b in zip(passed, inline):
        for key in ("actor/pg_loss", "actor/grad_norm", "reward/mean", "rollout_corr/rollout_is_mean",
                    "rollout_corr/rollout_is_ratio_fraction_high", "rollout_corr/rollout_is_max", "rollout_corr/log_prob_abs_diff_mean"):
            assert math.isfinite(a[key]), key
            assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-6), (a["step"], key)
    first = passed[0]
    assert first["rollout_corr/rollout_is_ratio_fraction_high"] > 0  # some weights truncated at 1.2
    assert first["rollout_corr/rollout_is_mean"] < 0.99  # the weights are far from 1 ...
    # ... and they reach the loss: without the correction the same first step has another gradient
    assert plain[0]["actor/grad_norm"] != pytest.approx(first["actor/grad_norm"], rel=1e-3)
