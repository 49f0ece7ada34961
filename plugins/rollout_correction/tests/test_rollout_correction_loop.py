"""Rollout correction through the loop: hf rollout log-probs -> IS weights -> the policy loss."""

from __future__ import annotations

import math

import pytest
import torch
from rl_core.algorithms.actor_loss import compute_actor_loss
from rl_core.config.load import load_config
from rl_core.config.schema import ActorConfig
from rl_core.plan.resolver import resolve
from rl_core.trainer.loop import Trainer, needs_old_log_prob_pass
from rl_rollout_correction.checks import config_problems
from rl_rollout_correction.config import RolloutCorrectionConfig
from rl_rollout_correction.correction import rollout_correction

from tests.e2e.helpers import read_metrics, write_tiny_run

IS_ON = {"rollout__calculate_log_probs": True, "algorithm__rollout_correction__rollout_is": "token",
         "algorithm__rollout_correction__rollout_is_threshold": 2.0}


def test_weights_of_one_leave_loss_and_gradient_unchanged():
    g = torch.Generator().manual_seed(0)
    old = -torch.rand(3, 5, generator=g)
    lp0 = old + 0.2 * torch.randn(3, 5, generator=g)
    adv = torch.randn(3, 5, generator=g)
    mask = torch.ones(3, 5)
    mask[1, 3:] = 0
    weights, _, m = rollout_correction(old, old.clone(), mask, RolloutCorrectionConfig(rollout_is="sequence"))
    assert torch.equal(weights, mask)  # exactly 1 on valid tokens
    assert m["rollout_corr/rollout_is_mean"] == 1.0 and m["rollout_corr/log_prob_abs_diff_max"] == 0.0
    out = []
    for w in (None, weights):
        lp = lp0.clone().requires_grad_(True)
        loss, _ = compute_actor_loss(log_prob=lp, old_log_prob=old, advantages=adv, response_mask=mask, rollout_is_weights=w, cfg=ActorConfig())
        loss.backward()
        out.append((loss.detach(), lp.grad))
    assert torch.equal(out[0][0], out[1][0]) and torch.equal(out[0][1], out[1][1])


def test_truncated_weights_scale_the_token_loss():
    # token-mean of -A * r with r = 1 (old == current): weights [2, 0.5] -> loss = -(2*1 + 0.5*1) / 2
    lp = torch.zeros(1, 2, requires_grad=True)
    loss, _ = compute_actor_loss(log_prob=lp, old_log_prob=torch.zeros(1, 2), advantages=torch.ones(1, 2),
                                 response_mask=torch.ones(1, 2), rollout_is_weights=torch.tensor([[2.0, 0.5]]), cfg=ActorConfig())
    assert loss.item() == pytest.approx(-1.25)


def test_config_needs_rollout_log_probs(tmp_path):
    cfg = load_config(write_tiny_run(tmp_path, **{**IS_ON, "rollout__calculate_log_probs": False}))
    problems = config_problems(cfg, rollout_logprobs=True)
    assert [p.key for p in problems] == ["rollout.calculate_log_probs"]
    bad = load_config(write_tiny_run(tmp_path, **{**IS_ON, "algorithm__rollout_correction__rollout_is_threshold": "5_0.5"}))
    assert "lower <= upper" in config_problems(bad)[0].what
    stack, problems = resolve(cfg)  # `rlcore check` refuses it
    assert stack is None and [p.key for p in problems if p.severity == "error"] == ["rollout.calculate_log_probs"]
    # the Trainer does not check again: a plan comes from the one pipeline (tests/core/test_resolve_once.py)


@pytest.mark.dist
def test_two_step_grpo_with_rollout_is_logs_weight_metrics(tmp_path):
    pytest.importorskip("rl_train_fsdp", reason="needs the rl-train-fsdp plugin (pip install -e plugins/train_fsdp)")
    stack, problems = resolve(load_config(write_tiny_run(tmp_path, **IS_ON)))
    assert stack is not None, [p.render() for p in problems]
    assert needs_old_log_prob_pass(stack)  # on-policy, but the weights need pi_old's log-probs
    trainer = Trainer(stack, progress=False)
    try:
        trainer.fit()
    finally:
        trainer.close()
    rows = read_metrics(tmp_path / "out")
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        for key in ("rollout_corr/rollout_is_mean", "rollout_corr/rollout_is_max", "rollout_corr/rollout_is_min",
                    "rollout_corr/rollout_is_ratio_fraction_high", "rollout_corr/log_prob_abs_diff_mean",
                    "rollout_corr/log_prob_abs_diff_max", "rollout_corr/kl", "actor/pg_loss"):
            assert key in row and math.isfinite(row[key]), (key, sorted(row))
        # the hf rollout and the trainer run the same fp32 model: the weights are ~1, none truncated
        assert row["rollout_corr/log_prob_abs_diff_max"] < 1e-3
        assert row["rollout_corr/rollout_is_mean"] == pytest.approx(1.0, abs=1e-3)
        assert row["rollout_corr/rollout_is_ratio_fraction_high"] == 0.0


def test_mismatch_metrics_of_the_update_s_log_probs_cover_only_the_rows_it_computed():
    from rl_rollout_correction.correction import offpolicy_metrics
    from rl_rollout_correction.feature import mismatch_metrics

    g = torch.Generator().manual_seed(1)
    old, roll = -torch.rand(4, 6, generator=g), -torch.rand(4, 6, generator=g)
    mask = torch.ones(4, 6)
    mask[2, 4:] = 0
    computed = torch.tensor([True, False, True, True])  # row 1 left out (zero advantage): its zeros are not log-probs
    old[1] = 0.0
    got = mismatch_metrics(old, computed, roll, mask)
    want = offpolicy_metrics(old[[0, 2, 3]], roll[[0, 2, 3]], mask[[0, 2, 3]].bool())
    assert got == {f"rollout_corr/{k}": v for k, v in want.items()}
    assert got["rollout_corr/kl"] != pytest.approx(offpolicy_metrics(old, roll, mask.bool())["kl"])
    assert mismatch_metrics(old, torch.zeros(4, dtype=torch.bool), roll, mask) == {}


@pytest.mark.parametrize("level,threshold", [("token", 1.2), ("sequence", 2.0), ("token", "0.8_1.25"), ("sequence", "0.5_1.5")])
def test_the_update_s_row_weights_are_the_pass_s_weights(level, threshold):
    """rollout_correction.row_weights (in the update, no metrics) gives is_weights' weights, truncated or masked."""
    from rl_rollout_correction.config import RolloutCorrectionConfig
    from rl_rollout_correction.correction import is_weights, row_weights

    gen = torch.Generator().manual_seed(0)
    old, rollout = -torch.rand(6, 5, generator=gen) * 3, -torch.rand(6, 5, generator=gen) * 3
    mask = torch.rand(6, 5, generator=gen) > 0.2
    want, _ = is_weights(old - rollout, mask, level, threshold)
    got = row_weights(old, rollout, mask.float(), RolloutCorrectionConfig(rollout_is=level, rollout_is_threshold=threshold))
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert (got != 1).any() and ((got == 0) | (got == want)).all()
