"""Advantage estimators against values worked out by hand."""

import math

import pytest
import torch
from rl_core.algorithms import advantages as A

from ._helpers import NAN, close, t

SQRT2 = math.sqrt(2.0)


# ----------------------------------------------------------------------- gae
def test_gae_by_hand():
    # gamma = 0.9, lam = 0.8, so gamma * lam = 0.72; V after the last valid token is 0.
    # row 0: r = [0, 0, 1], V = [0.5, 0.6, 0.7], all valid
    #   t=2: delta = 1 + 0.9*0   - 0.7 = 0.3        A2 = 0.3
    #   t=1: delta = 0 + 0.9*0.7 - 0.6 = 0.03       A1 = 0.03 + 0.72*0.3   = 0.246
    #   t=0: delta = 0 + 0.9*0.6 - 0.5 = 0.04       A0 = 0.04 + 0.72*0.246 = 0.21712
    #   returns = A + V = [0.71712, 0.846, 1.0]
    # row 1: mask [1, 1, 0] (right padding; garbage reward 99 and NaN value there)
    #   t=1: delta = 1 - 0.4 = 0.6                  A1 = 0.6
    #   t=0: delta = 0 + 0.9*0.4 - 0.2 = 0.16       A0 = 0.16 + 0.72*0.6 = 0.592
    #   returns = [0.792, 1.0, 0]
    # row 2: mask [1, 0, 1] (a gap, e.g. tool output): t=1 is skipped
    #   t=2: delta = 1 - 0.7 = 0.3                  A2 = 0.3
    #   t=0: delta = 0 + 0.9*0.7 - 0.5 = 0.13       A0 = 0.13 + 0.72*0.3 = 0.346
    #   returns = [0.846, 0, 1.0]
    rewards = t([[0, 0, 1], [0, 1, 99], [0, 5, 1]])
    values = t([[0.5, 0.6, 0.7], [0.2, 0.4, NAN], [0.5, 9.0, 0.7]])
    mask = t([[1, 1, 1], [1, 1, 0], [1, 0, 1]])
    # the estimator itself; verl's default whitening is checked in test_gae_whitens_by_default
    adv, ret = A.gae(token_level_rewards=rewards, response_mask=mask, values=values, gamma=0.9, lam=0.8,
                     options={"whiten": False})
    close(adv, [[0.21712, 0.246, 0.3], [0.592, 0.6, 0], [0.346, 0, 0.3]])
    close(ret, [[0.71712, 0.846, 1.0], [0.792, 1.0, 0], [0.846, 0, 1.0]])
    assert adv.dtype == ret.dtype == torch.float32
    assert adv[1, 2].item() == 0.0 and adv[2, 1].item() == 0.0  # exactly zero where masked


def test_gae_whitens_by_default():
    rewards, values, mask = t([[0, 0, 1]]), t([[0.5, 0.6, 0.7]]), t([[1, 1, 1]])
    plain, _ = A.gae(token_level_rewards=rewards, response_mask=mask, values=values, gamma=0.9, lam=0.8)
    whitened, _ = A.gae(token_level_rewards=rewards, response_mask=mask, values=values, gamma=0.9, lam=0.8,
                        options={"whiten": True})
    torch.testing.assert_close(plain, whitened)


def test_gae_whiten_option():
    # A = [0.21712, 0.246, 0.3]: mean 0.25437; whitening gives mean 0, unbiased std 1
    rewards, values, mask = t([[0, 0, 1]]), t([[0.5, 0.6, 0.7]]), t([[1, 1, 1]])
    adv, ret = A.gae(token_level_rewards=rewards, response_mask=mask, values=values, gamma=0.9, lam=0.8,
                     options={"whiten": True})
    close(adv.mean(), 0.0)
    close(adv.std(), 1.0, atol=1e-4)
    close(ret, [[0.71712, 0.846, 1.0]])  # returns come from the un-whitened advantages


def test_gae_needs_values():
    with pytest.raises(ValueError, match="values"):
        A.gae(token_level_rewards=t([[1.0]]), response_mask=t([[1.0]]))


def test_gae_bf16_inputs():
    # 0, 0.5, 1 are exact in bf16: gamma = lam = 1, r = [0, 1], V = [0.5, 0.5]
    #   t=1: A1 = 1 - 0.5 = 0.5;  t=0: delta = 0 + 0.5 - 0.5 = 0, A0 = 0 + 0.5 = 0.5
    adv, ret = A.gae(token_level_rewards=t([[0, 1]], torch.bfloat16), response_mask=t([[1, 1]]),
                     values=t([[0.5, 0.5]], torch.bfloat16), options={"whiten": False})
    assert adv.dtype == torch.float32
    close(adv, [[0.5, 0.5]])
    close(ret, [[1.0, 1.0]])


# ---------------------------------------------------------------------- grpo
# Outcome rewards on each row's last valid token; 7.0 / NaN are garbage at masked positions.
# group 0: scores [1, 0, 0.5]; group 1: [2, 0]; group 2: singleton [3]; group 3: all equal [0.1, 0.1]
GROUP_REWARDS = t([
    [0, 0, 1], [0, 0, 7], [0.5, NAN, 7],
    [0, 2, 0], [0, 0, 0],
    [0, 0, 3],
    [0, 0.1, 7], [0, 0.1, 7],
])
GROUP_MASK = t([
    [1, 1, 1], [1, 1, 0], [1, 0, 0],
    [1, 1, 1], [1, 1, 1],
    [1, 1, 1],
    [1, 1, 0], [1, 1, 0],
])
GROUP_INDEX = torch.tensor([0, 0, 0, 1, 1, 2, 3, 3])


def _per_seq(adv, mask):
    """The (constant) advantage of each row, checking it is constant and 0 where masked."""
    m = mask.bool()
    assert torch.all(adv[~m] == 0)
    first = adv[:, 0]
    assert torch.allclose(torch.where(m, adv, first[:, None]), first[:, None].expand_as(adv))
    return first


def test_grpo_by_hand():
    # group 0: mean = 0.5, unbiased std = sqrt((0.25 + 0.25 + 0) / 2) = 0.5
    #          A = [0.5, -0.5, 0] / (0.5 + 1e-6) = [1, -1, 0]
    # group 1: mean = 1, std = sqrt((1 + 1) / 1) = sqrt(2); A = [1, -1] / sqrt(2)
    # group 2: size 1 -> 0 with zero_singleton_groups (verl's raw score: test_grpo_verl_defaults)
    # group 3: all equal -> exactly 0
    adv, ret = A.grpo(token_level_rewards=GROUP_REWARDS, response_mask=GROUP_MASK, index=GROUP_INDEX,
                      options={"zero_singleton_groups": True, "returns": "reward_to_go"})
    per_seq = _per_seq(adv, GROUP_MASK)
    close(per_seq, [1, -1, 0, 1 / SQRT2, -1 / SQRT2, 0, 0, 0], atol=1e-5)
    assert per_seq[5].item() == 0.0 and per_seq[6].item() == 0.0 and per_seq[7].item() == 0.0
    assert not torch.isnan(adv).any() and not torch.isnan(ret).any()
    # returns: undiscounted reward-to-go, 0 at masked positions
    close(ret[0], [1, 1, 1])
    close(ret[2], [0.5, 0, 0])
    close(ret[3], [2, 2, 0])


def test_grpo_verl_defaults():
    # verl: a group of one has mean 0 and std 1, so A = 3 / (1 + 1e-6); returns are the advantages
    adv, ret = A.grpo(token_level_rewards=GROUP_REWARDS, response_mask=GROUP_MASK, index=GROUP_INDEX)
    per_seq = _per_seq(adv, GROUP_MASK)
    close(per_seq, [1, -1, 0, 1 / SQRT2, -1 / SQRT2, 3 / (1 + 1e-6), 0, 0], atol=1e-5)
    assert torch.equal(ret, adv)
    with pytest.raises(ValueError, match="returns"):
        A.grpo(token_level_rewards=GROUP_REWARDS, response_mask=GROUP_MASK, index=GROUP_INDEX, options={"returns": "nope"})


def test_dr_grpo_by_hand():
    # norm_adv_by_std=False: A = score - group mean
    # group 0: [0.5, -0.5, 0]; group 1: [1, -1]; singleton 0; all-equal 0
    adv, _ = A.grpo(token_level_rewards=GROUP_REWARDS, response_mask=GROUP_MASK, index=GROUP_INDEX,
                    options={"norm_adv_by_std": False, "zero_singleton_groups": True})
    close(_per_seq(adv, GROUP_MASK), [0.5, -0.5, 0, 1, -1, 0, 0, 0])


def test_all_equal_group_with_float_noise_is_exactly_zero(estimators=(A.grpo,)):
    # In float32, 0.9 + 0.9 + 0.9 = 2.7000003 and / 3 = 0.90000004 != 0.9: the deviations are
    # ~6e-8 and the std ~7e-8, so a naive (r - mean) / (std + 1e-6) would give ~0.056, not 0.
    rewards = t([[0.9], [0.9], [0.9]])
    kwargs = dict(token_level_rewards=rewards, response_mask=t([[1], [1], [1]]), index=torch.tensor([4, 4, 4]))
    for fn in estimators:
        adv, _ = fn(**kwargs)
        assert torch.equal(adv, torch.zeros(3, 1)), fn.__name__


def test_grpo_bf16_matches_fp32():
    # every score here is exact in bf16 (0, 0.5, 1, 2, 3); the 0.1 group is not, but it is all-equal.
    mask = GROUP_MASK.bool()
    rewards = torch.where(mask, GROUP_REWARDS, torch.zeros(()))
    a32, _ = A.grpo(token_level_rewards=rewards, response_mask=GROUP_MASK, index=GROUP_INDEX)
    a16, _ = A.grpo(token_level_rewards=rewards.bfloat16(), response_mask=GROUP_MASK.bfloat16(), index=GROUP_INDEX)
    assert a16.dtype == torch.float32
    torch.testing.assert_close(a16, a32)


def test_grpo_needs_index_and_checks_shapes():
    with pytest.raises(ValueError, match="index"):
        A.grpo(token_level_rewards=t([[1.0]]), response_mask=t([[1.0]]))
    with pytest.raises(ValueError, match=r"index must be \[B\]"):
        A.grpo(token_level_rewards=t([[1.0], [0.0]]), response_mask=t([[1.0], [1.0]]), index=torch.tensor([0]))
    with pytest.raises(ValueError, match="response_mask"):
        A.grpo(token_level_rewards=t([[1.0, 0.0]]), response_mask=t([[1.0]]), index=torch.tensor([0]))


def test_group_index_from_uids():
    assert A.group_index(["b", "a", "b", "c"]).tolist() == [0, 1, 0, 2]
    assert A.group_index(["b", "a", "b"]).dtype == torch.int64
    # estimators also accept a plain sequence of keys
    adv, _ = A.grpo(token_level_rewards=t([[1.0], [0.0]]), response_mask=t([[1], [1]]), index=["u", "u"])
    close(adv, [[1 / SQRT2], [-1 / SQRT2]])


# ------------------------------------------------------------ reward-to-go
def test_reward_to_go_discounted_skips_gaps():
    # gamma 0.5, mask [1, 0, 1, 1], r = [1, 100, 0, 4]: G3 = 4, G2 = 0 + 0.5*4 = 2, (t=1 skipped), G0 = 1 + 0.5*2 = 2
    g = A.reward_to_go(t([[1, 100, 0, 4]]), t([[1, 0, 1, 1]]), gamma=0.5)
    close(g, [[2, 0, 2, 4]])
    # gamma 1: G = [5, 0, 4, 4]
    close(A.reward_to_go(t([[1, 100, 0, 4]]), t([[1, 0, 1, 1]])), [[5, 0, 4, 4]])


# ---------------------------------------------------------- compute_advantage
def test_compute_advantage_dispatches_through_the_registry():
    adv, _ = A.compute_advantage("grpo", token_level_rewards=GROUP_REWARDS, response_mask=GROUP_MASK,
                                 index=GROUP_INDEX, gamma=1.0, lam=1.0, options=None)
    expected, _ = A.grpo(token_level_rewards=GROUP_REWARDS, response_mask=GROUP_MASK, index=GROUP_INDEX)
    torch.testing.assert_close(adv, expected)


@pytest.mark.parametrize("name, missing", [("gae", "values"), ("grpo", "index")])
def test_compute_advantage_checks_declared_needs(name, missing, registry=None):
    card = None if registry is None else registry.get("estimator", name)  # a plugin's estimator: its card
    with pytest.raises(ValueError, match=missing):
        A.compute_advantage(name, token_level_rewards=t([[1.0]]), response_mask=t([[1.0]]), card=card)


def test_compute_advantage_unknown_name_lists_installed():
    from rl_core.plugins import UnknownCardError

    with pytest.raises(UnknownCardError, match="grpo"):
        A.compute_advantage("no_such_estimator", token_level_rewards=t([[1.0]]), response_mask=t([[1.0]]))


def test_compute_advantage_takes_a_card_not_a_registry():
    """Run-time code reads no registry (issue 46): an old ``registry=`` caller gets the fix, not the estimator's TypeError."""
    from rl_core.plugins import Registry

    with pytest.raises(TypeError, match=r"card=registry.get\('estimator', 'grpo'\)"):
        A.compute_advantage("grpo", registry=Registry(), token_level_rewards=t([[1.0]]), response_mask=t([[1.0]]), index=torch.tensor([0]))
    with pytest.raises(Exception, match=r"registry.get\('estimator', 'rloo'\)"):  # a plugin's name without its card
        A.compute_advantage("rloo", token_level_rewards=t([[1.0]]), response_mask=t([[1.0]]), index=torch.tensor([0]))
