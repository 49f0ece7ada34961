"""rl-algorithms' estimators and policy losses against numbers verl 0.9.1 itself computed (the fixture of rl-core's
tests/fixtures/verl/verl_0.9.1.pt, made by bench/verl_parity/make_fixture.py in a side venv), through the installed
plugins' registry (as a run resolves them)."""

from __future__ import annotations

import pytest
from rl_core.plugins import get_registry

from tests.algorithms import test_verl_parity as parity
from tests.algorithms.test_verl_parity import fx  # noqa: F401  (the fixture's tensors, a pytest fixture)

ESTIMATORS = ["grpo_vectorized/normTrue", "grpo_passk/normTrue", "grpo_passk/normFalse", "rloo", "rloo/dense", "rloo_vectorized",
              "opo", "opo/dense", "reinforce_plus_plus/g1.0", "reinforce_plus_plus/g0.9", "reinforce_plus_plus/dense/g0.9",
              "reinforce_plus_plus_baseline", "reinforce_plus_plus_baseline/dense", "remax", "remax/dense", "gpg", "gpg/dense"]


@pytest.fixture(scope="module")
def registry():
    return get_registry()


def test_every_estimator_of_the_fixture_is_checked_here_or_in_core(fx):  # noqa: F811
    core = {"gae", "grpo"}
    assert {k.split("/")[0] for k in fx["advantages"]} - core == {k.split("/")[0] for k in ESTIMATORS}


@pytest.mark.parametrize("key", ESTIMATORS)
def test_estimators_match_verl(fx, key, registry):  # noqa: F811
    parity.test_estimators_match_verl(fx, key, registry)


@pytest.mark.parametrize("key", parity.policy_loss_cases(core=False))
def test_policy_losses_match_verl(fx, key, registry):  # noqa: F811
    parity.test_policy_losses_match_verl(fx, key, registry)
