"""rl-algorithms' cards declare typed options (rl_core.card_options), checked as rl-core's own are."""

import pytest

from tests.algorithms.test_card_options import _problems
from tests.algorithms.test_card_options import test_every_builtin_card_declares_options_whose_defaults_are_the_functions as defaults_check


def test_declared_options_pass():
    assert _problems("actor.policy_loss=clip_cov", "actor.policy_loss_options={clip_cov_ratio: 0.001, clip_cov_lb: 1}") == []
    assert _problems("actor.policy_loss=dro", "actor.policy_loss_options.dro_beta=0.1") == []
    assert _problems("algorithm.adv_estimator=grpo_passk", "algorithm.options={norm_adv_by_std: false, epsilon: 0.01}") == []


def test_wrong_values_and_required_options_are_named():
    (p,) = _problems("actor.policy_loss=clip_cov", "actor.policy_loss_options.clip_cov_ratio=0")
    assert p.key == "actor.policy_loss_options" and "the policy loss 'clip_cov'" in p.what and "clip_cov_ratio" in p.what and "> 0" in p.what
    (p,) = _problems("actor.policy_loss=dro")
    assert p.key == "actor.policy_loss_options.dro_beta" and p.what == "is required by the policy loss 'dro' (from rl-algorithms)"


@pytest.mark.parametrize("kind", ["estimator", "policy_loss"])
def test_every_card_declares_options_whose_defaults_are_the_functions(kind):
    defaults_check(kind, "rl-algorithms")
