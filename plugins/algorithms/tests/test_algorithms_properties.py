"""Property tests (hypothesis) of rl-algorithms' estimators and losses: the invariants rl-core's tests check for its own."""

import math

import pytest

hypothesis = pytest.importorskip("hypothesis", reason="hypothesis is in rl-core's [test] extra")
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from rl_algorithms import estimators as A  # noqa: E402
from rl_algorithms.policy_loss_pg import gspo  # noqa: E402
from rl_core.algorithms.aggregation import LOSS_AGG_MODES  # noqa: E402
from rl_core.plugins import get_registry  # noqa: E402

from tests.algorithms.test_properties import FAST, grouped_batch, no_leak_into_estimator, no_leak_into_loss  # noqa: E402

ESTIMATORS = {"rloo": {}, "reinforce_plus_plus": dict(gamma=0.9), "reinforce_plus_plus_baseline": {}, "remax": {}}


@FAST
@given(grouped_batch())
def test_rloo_equals_naive_leave_one_out(batch):
    rewards, mask, index, _ = batch
    adv, _ = A.rloo(token_level_rewards=rewards, response_mask=mask, index=index, options={"zero_singleton_groups": True})
    scores = [float((rewards[i] * mask[i]).sum()) for i in range(rewards.shape[0])]
    for i in range(len(scores)):
        others = [scores[j] for j in range(len(scores)) if j != i and index[j] == index[i]]
        expected = scores[i] - sum(others) / len(others) if others else 0.0
        assert math.isclose(float(adv[i, 0]), expected, abs_tol=1e-3, rel_tol=1e-4)


@FAST
@given(grouped_batch(), st.sampled_from(sorted(ESTIMATORS)), st.sampled_from([float("nan"), float("inf"), 1e6, -3.0]))
def test_masked_positions_never_leak_into_estimators(batch, name, fill):
    no_leak_into_estimator(batch, name, fill, ESTIMATORS[name], get_registry())


@FAST
@given(grouped_batch(), st.sampled_from(LOSS_AGG_MODES), st.sampled_from([float("nan"), 1e6, -7.0]))
def test_masked_positions_never_leak_into_gspo(batch, mode, fill):
    no_leak_into_loss(batch, gspo, mode, fill)
