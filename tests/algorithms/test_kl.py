"""KL estimators, controllers and the KL-in-reward penalty by hand."""

import math

import pytest
import torch
from rl_core.algorithms.kl import (
    AdaptiveKLController,
    FixedKLController,
    apply_kl_penalty,
    kl_controller_from_config,
    kl_penalty,
)
from rl_core.config.schema import KLControlConfig

from ._helpers import close, t

# d = log_prob - ref_log_prob = [0.5, -0.5, 0]
LP, REF = t([0.5, -0.5, 0.0]), t([0.0, 0.0, 0.0])


@pytest.mark.parametrize(
    "kinds, expected",
    [
        (("k1", "kl"), [0.5, -0.5, 0.0]),
        (("abs",), [0.5, 0.5, 0.0]),
        (("k2", "mse"), [0.125, 0.125, 0.0]),  # d^2 / 2
        # k3 = exp(-d) - 1 + d: exp(-0.5) - 0.5 = 0.6065307 - 0.5 = 0.1065307; exp(0.5) - 1.5 = 0.1487213
        (("k3", "low_var_kl"), [math.exp(-0.5) - 0.5, math.exp(0.5) - 1.5, 0.0]),
    ],
)
def test_kl_kinds_by_hand(kinds, expected):
    for kind in kinds:
        close(kl_penalty(LP, REF, kind), expected)


def test_k3_is_clamped():
    # d = -30: exp(30) - 1 - 30 would overflow-ish -> clamped to 10; d = +30: exp(-20) - 1 + 20 = 19 -> 10
    out = kl_penalty(t([-30.0, 30.0, -2.0]), t([0.0, 0.0, 0.0]), "low_var_kl")
    # d = -2: exp(2) - 1 - 2 = 4.3890561 (inside the clamp)
    close(out, [10.0, 10.0, math.exp(2) - 3])


def test_kl_bf16_and_bad_kind():
    assert kl_penalty(LP.bfloat16(), REF.bfloat16(), "k1").dtype == torch.float32
    with pytest.raises(ValueError, match="low_var_kl"):
        kl_penalty(LP, REF, "full")


def test_fixed_controller():
    c = FixedKLController(0.3)
    c.update(5.0, 100)
    assert c.value == 0.3


def test_adaptive_controller_by_hand():
    c = AdaptiveKLController(init_kl_coef=0.1, target_kl=0.05, horizon=100)
    # kl 0.1: error = 0.1/0.05 - 1 = 1 -> clipped to 0.2; value *= 1 + 0.2 * 10/100 = 1.02 -> 0.102
    c.update(0.1, n_steps=10)
    assert c.value == pytest.approx(0.102)
    # kl 0.045: error = 0.045/0.05 - 1 = -0.1; value *= 1 - 0.1 * 10/100 = 0.99 -> 0.10098
    c.update(0.045, n_steps=10)
    assert c.value == pytest.approx(0.10098)


def test_controller_from_config():
    assert isinstance(kl_controller_from_config(KLControlConfig()), FixedKLController)
    c = kl_controller_from_config(KLControlConfig(type="adaptive", kl_coef=0.2, target_kl=1.0, horizon=50))
    assert isinstance(c, AdaptiveKLController) and c.value == 0.2 and c.horizon == 50


def test_apply_kl_penalty_by_hand():
    # beta = 0.5, kind k1, ref = 0 -> kl = old_log_prob on valid tokens
    # row 0: kl [0.1, 0.2, 0.3], scores [0, 0, 1] -> rewards [-0.05, -0.1, 1 - 0.15 = 0.85]; mean kl 0.2
    # row 1: kl [0.4, 0.2, pad], scores [0, 2, pad] -> rewards [-0.2, 2 - 0.1 = 1.9, 0]; mean kl 0.3
    # measured kl = (0.2 + 0.3) / 2 = 0.25
    scores = t([[0, 0, 1], [0, 2, 5]])
    old = t([[0.1, 0.2, 0.3], [0.4, 0.2, float("nan")]])
    ref = torch.zeros(2, 3)
    mask = t([[1, 1, 1], [1, 1, 0]])
    ctrl = FixedKLController(0.5)
    rewards, m = apply_kl_penalty(scores, old, ref, mask, ctrl, "k1")
    close(rewards, [[-0.05, -0.1, 0.85], [-0.2, 1.9, 0.0]])
    assert m["actor/reward_kl_penalty"] == pytest.approx(0.25)
    assert m["actor/reward_kl_penalty_coeff"] == 0.5

    # adaptive: beta used is the value before the update; then error = 0.25/0.05 - 1 -> 0.2,
    # value *= 1 + 0.2 * 2 / 10 = 1.04 -> 0.52
    ctrl = AdaptiveKLController(0.5, target_kl=0.05, horizon=10)
    rewards, m = apply_kl_penalty(scores, old, ref, mask, ctrl, "k1")
    close(rewards, [[-0.05, -0.1, 0.85], [-0.2, 1.9, 0.0]])
    assert ctrl.value == pytest.approx(0.52)
    apply_kl_penalty(scores, old, ref, mask, ctrl, "k1", update=False)
    assert ctrl.value == pytest.approx(0.52)
