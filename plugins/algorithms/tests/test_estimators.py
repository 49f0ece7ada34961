"""rl-algorithms' estimators (rloo, reinforce++, reinforce++-baseline, remax) against values worked out by hand."""

import math

import pytest
import torch
from rl_algorithms import estimators as A
from rl_core.algorithms.advantages import compute_advantage
from rl_core.plugins import get_registry

from tests.algorithms._helpers import NAN, close, t
from tests.algorithms.test_advantages import GROUP_INDEX, GROUP_MASK, GROUP_REWARDS, _per_seq
from tests.algorithms.test_advantages import test_all_equal_group_with_float_noise_is_exactly_zero as all_equal_check
from tests.algorithms.test_advantages import test_compute_advantage_checks_declared_needs as needs_check


def test_all_equal_group_with_float_noise_is_exactly_zero():
    all_equal_check((A.rloo, A.reinforce_plus_plus_baseline))


# ---------------------------------------------------------------------- rloo
def test_rloo_by_hand():
    # A_i = r_i - mean of the others
    # group 0 [1, 0, 0.5]: 1 - (0 + 0.5)/2 = 0.75;  0 - (1 + 0.5)/2 = -0.75;  0.5 - (1 + 0)/2 = 0
    # group 1 [2, 0]:      2 - 0 = 2;  0 - 2 = -2
    # group 2 singleton -> 0 (zero_singleton_groups; verl keeps the raw score 3);  group 3 all equal -> 0
    adv, ret = A.rloo(token_level_rewards=GROUP_REWARDS, response_mask=GROUP_MASK, index=GROUP_INDEX,
                      options={"zero_singleton_groups": True, "returns": "reward_to_go"})
    close(_per_seq(adv, GROUP_MASK), [0.75, -0.75, 0, 2, -2, 0, 0, 0])
    verl, _ = A.rloo(token_level_rewards=GROUP_REWARDS, response_mask=GROUP_MASK, index=GROUP_INDEX)
    close(_per_seq(verl, GROUP_MASK), [0.75, -0.75, 0, 2, -2, 3, 0, 0])
    assert not torch.isnan(ret).any()


def test_rloo_bf16():
    adv, _ = A.rloo(token_level_rewards=t([[1.0], [0.0], [0.5]], torch.bfloat16), response_mask=t([[1], [1], [1]]),
                    index=torch.tensor([0, 0, 0]))
    assert adv.dtype == torch.float32
    close(adv, [[0.75], [-0.75], [0.0]])


# --------------------------------------------------------- reinforce++ (+baseline)
def test_reinforce_plus_plus_by_hand():
    # gamma = 0.5
    # row 0: r = [1, 0, 2]:            G2 = 2, G1 = 0 + 0.5*2 = 1, G0 = 1 + 0.5*1 = 1.5
    # row 1: r = [0, 4, pad]:          G1 = 4, G0 = 0 + 0.5*4 = 2
    # valid returns [1.5, 1, 2, 2, 4]: mean 10.5/5 = 2.1
    # deviations [-0.6, -1.1, -0.1, -0.1, 1.9], squares sum 0.36+1.21+0.01+0.01+3.61 = 5.2
    # unbiased var 5.2/4 = 1.3, std = sqrt(1.3 + 1e-8) = 1.1401754
    rewards = t([[1, 0, 2], [0, 4, NAN]])
    mask = t([[1, 1, 1], [1, 1, 0]])
    adv, ret = A.reinforce_plus_plus(token_level_rewards=rewards, response_mask=mask, gamma=0.5)
    s = math.sqrt(1.3)
    close(ret, [[1.5, 1, 2], [2, 4, 0]])
    close(adv, [[-0.6 / s, -1.1 / s, -0.1 / s], [-0.1 / s, 1.9 / s, 0]])
    assert adv[1, 2].item() == 0.0


def test_reinforce_plus_plus_baseline_by_hand():
    # groups [0, 0], [1, 1], [2] with scores [1, 0], [3, 1], [5] (row 4 is a singleton, padded)
    # centred: [0.5, -0.5], [1, -1], [0] (singleton -> 0)
    # broadcast to tokens (9 valid): .5 .5 -.5 -.5 1 1 -1 -1 0 -> mean 0, sum of squares 5
    # unbiased var = 5/8 = 0.625, std = 0.7905694
    rewards = t([[0, 1], [0, 0], [0, 3], [1, 0], [5, 8]])
    mask = t([[1, 1], [1, 1], [1, 1], [1, 1], [1, 0]])
    index = torch.tensor([0, 0, 1, 1, 2])
    adv, ret = A.reinforce_plus_plus_baseline(token_level_rewards=rewards, response_mask=mask, index=index,
                                              options={"zero_singleton_groups": True, "returns": "reward_to_go"})
    s = math.sqrt(0.625)
    close(adv, [[0.5 / s] * 2, [-0.5 / s] * 2, [1 / s] * 2, [-1 / s] * 2, [0, 0]])
    close(ret, [[1, 1], [0, 0], [3, 3], [1, 0], [5, 0]])


# --------------------------------------------------------------------- remax
def test_remax_by_hand():
    # row 0: r = [0, 0, 1], greedy reward 0.5:  G = [1, 1, 1]     -> A = [0.5, 0.5, 0.5]
    # row 1: r = [0.1, 0.2, pad], greedy 0.3:   G = [0.3, 0.2, 0] -> A = [0.0, -0.1, 0]
    rewards = t([[0, 0, 1], [0.1, 0.2, 9]])
    mask = t([[1, 1, 1], [1, 1, 0]])
    adv, ret = A.remax(token_level_rewards=rewards, response_mask=mask, baseline_rewards=t([0.5, 0.3]))
    close(adv, [[0.5, 0.5, 0.5], [0.0, -0.1, 0]])
    close(ret, [[1, 1, 1], [0.3, 0.2, 0]])
    assert adv[1, 2].item() == 0.0
    with pytest.raises(ValueError, match="baseline_rewards"):
        A.remax(token_level_rewards=rewards, response_mask=mask)


def test_remax_bf16():
    adv, _ = A.remax(token_level_rewards=t([[0, 1]], torch.bfloat16), response_mask=t([[1, 1]]),
                     baseline_rewards=t([0.5], torch.bfloat16))
    assert adv.dtype == torch.float32
    close(adv, [[0.5, 0.5]])


# ---------------------------------------------------------- through the registry
def test_compute_advantage_dispatches_through_the_registry():
    adv, _ = compute_advantage("rloo", card=get_registry().get("estimator", "rloo"), token_level_rewards=GROUP_REWARDS, response_mask=GROUP_MASK,
                               index=GROUP_INDEX, gamma=1.0, lam=1.0, options=None)
    expected, _ = A.rloo(token_level_rewards=GROUP_REWARDS, response_mask=GROUP_MASK, index=GROUP_INDEX)
    torch.testing.assert_close(adv, expected)


@pytest.mark.parametrize("name, missing", [("rloo", "index"), ("remax", "baseline_rewards")])
def test_compute_advantage_checks_declared_needs(name, missing):
    needs_check(name, missing, get_registry())
