"""verl 0.9.1 parity of the rollout correction (the fixture tests/algorithms/test_verl_parity.py reads: made by
verl's rollout_corr_helper; tests/fixtures/verl): weights, rejection masks and the rollout_corr/* metrics."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from rl_rollout_correction.config import RolloutCorrectionConfig
from rl_rollout_correction.correction import rollout_correction

from tests.algorithms.test_verl_parity import ATOL, FIXTURE, close, fx  # noqa: F401 - fx: the fixture, shared


# ------------------------------------------------------------ rollout correction
@pytest.mark.parametrize("key", sorted(torch.load(FIXTURE, weights_only=False)["rollout_correction"]))
def test_rollout_correction_matches_verl(fx, key):
    x = fx["inputs"]
    case = fx["rollout_correction"][key]
    cfg = RolloutCorrectionConfig(**{"rollout_is_threshold": 2.0, **case["config"]})
    rollout = x["old_log_prob"] if key == "equal_logprobs" else x["rollout_log_prob"]
    weights, new_mask, metrics = rollout_correction(x["old_log_prob"], rollout, x["response_mask"], cfg)
    if case["rollout_is_weights"] is None:
        assert weights is None
    else:
        close(weights, case["rollout_is_weights"], what=f"{key} weights")
    if "response_mask" in case:
        assert torch.equal(new_mask.float(), case["response_mask"]), key
    ours = set(metrics)
    # verl's per-criterion statistics of the rejection statistic are not produced (docs/config.md)
    theirs = {k for k in case["metrics"] if not k.startswith("rollout_corr/rollout_rs_") or k.endswith("masked_fraction")}
    assert len(theirs) >= 16
    assert theirs <= ours, sorted(theirs - ours)
    for name in theirs:
        assert metrics[name] == pytest.approx(case["metrics"][name], abs=ATOL, rel=1e-5), f"{key} {name}"


def test_equal_log_probs_give_weights_of_exactly_one(fx):
    x = fx["inputs"]
    mask = x["response_mask"].bool()
    for level in ("token", "sequence"):
        cfg = SimpleNamespace(rollout_is=level, rollout_is_threshold=2.0, rollout_is_batch_normalize=False, rollout_rs=None, rollout_rs_threshold=None)
        w, _, m = rollout_correction(x["old_log_prob"], x["old_log_prob"].clone(), x["response_mask"], cfg)
        assert (w[mask] == 1.0).all() and (w[~mask] == 0).all()
        assert m["rollout_corr/log_prob_abs_diff_max"] == 0.0
        assert m["rollout_corr/rollout_is_ratio_fraction_high"] == 0.0
