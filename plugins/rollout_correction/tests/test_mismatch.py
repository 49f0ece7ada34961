"""The rollout-vs-trainer gap (issue 51, rl_rollout_correction.mismatch): the gap metrics and the bound, and the keys
of this package that make the Plan ask the rollout for its log-probs every step (rl_core.rollout.log_prob_decision)."""

from __future__ import annotations

import pytest
import torch
from rl_core.config.load import load_config
from rl_core.config.schema import RolloutConfig
from rl_core.plan.resolver import resolve
from rl_core.rollout import log_prob_decision
from rl_core_testing.tiny_run import write_tiny_run
from rl_rollout_correction import mismatch
from rl_rollout_correction.feature import CORRECTION


def test_gap_metrics_and_bound():
    trainer = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.25, 0.0]])
    rollout = torch.tensor([[-1.0, -2.5, -3.0], [-0.5, -0.05, -9.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    assert mismatch.gap_metrics(trainer, rollout, mask, 0.1) == {mismatch.GAP_FRAC: pytest.approx(2 / 5)}
    mismatch.check_gap(trainer, rollout, mask, bound=None, step=1, backend="hf")  # no bound: never
    mismatch.check_gap(trainer, rollout, mask, bound=0.5, step=1, backend="hf")  # the 9.0 is masked
    with pytest.raises(mismatch.MismatchError) as err:
        mismatch.check_gap(trainer, rollout, mask, bound=0.3, step=4, backend="vllm")
    msg = str(err.value)
    assert "step 4" in msg and "(vllm)" in msg and "row 0, response position 1" in msg and "0.5 >" in msg and "-2.5" in msg
    nan = rollout.clone()
    nan[1, 0] = float("nan")
    with pytest.raises(mismatch.MismatchError, match="row 1, response position 0"):
        mismatch.check_gap(trainer, nan, mask, bound=1.0, step=1, backend="hf")


def test_bound_defaults_to_zero_in_exact_mode_only():
    assert mismatch.bound_of(load_config()) is None
    assert mismatch.bound_of(load_config(overrides=["rollout.exact=true"])) == 0.0
    assert mismatch.bound_of(load_config(overrides=["rollout.exact=true", "rollout.mismatch.max_abs_diff=0.2"])) == 0.2
    assert mismatch.bound_of(load_config(overrides=["rollout.mismatch.max_abs_diff=0"])) == 0.0


def test_log_probs_default_to_auto_and_the_plan_decides(tmp_path):
    assert RolloutConfig().calculate_log_probs is None
    plan, _ = resolve(load_config(write_tiny_run(tmp_path)))
    assert plan.config.rollout.calculate_log_probs is None  # the hf rollout too: steps 1, 11, 21, ... (the Plan's config holds the decision)
    cfg = load_config()
    assert log_prob_decision.decide(cfg).rollout.calculate_log_probs is None  # nothing needs them: a sample of steps (hf's too)
    for needs in (["algorithm.rollout_correction.rollout_is=token"], ["rollout.exact=true"], ["rollout.mismatch.max_abs_diff=0.5"],
                  ["rollout.precision=fp8"]):
        c = load_config(overrides=needs)
        c = CORRECTION.defaults(c)
        assert log_prob_decision.decide(c, users=CORRECTION.log_prob_users(c)).rollout.calculate_log_probs is True, needs
    assert log_prob_decision.decide(cfg, estimator_reads=True).rollout.calculate_log_probs is True
    off = load_config(overrides=["rollout.calculate_log_probs=false", "algorithm.rollout_correction.rollout_is=token"])
    assert log_prob_decision.decide(off, users=CORRECTION.log_prob_users(off)).rollout.calculate_log_probs is False  # forced: the check refuses it below
    forced = load_config(overrides=["rollout.calculate_log_probs=false", "rollout.mismatch.max_abs_diff=0.5"])
    (p,) = log_prob_decision.forced_off_problems(forced, CORRECTION.log_prob_users(forced))
    assert p.key == "rollout.calculate_log_probs" and "rollout.mismatch.max_abs_diff" in p.what
    assert log_prob_decision.forced_off_problems(load_config(overrides=["rollout.calculate_log_probs=false"])) == []
