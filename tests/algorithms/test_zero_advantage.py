"""rl_core.algorithms.zero_advantage: which rows carry a gradient, and when they may be skipped."""

from __future__ import annotations

import attrs
import pytest
import torch
from rl_core.algorithms.zero_advantage import can_skip_zero_advantage_rows, rows_with_signal
from rl_core.config.schema import ActorConfig


def test_rows_with_signal_by_hand():
    nan = float("nan")
    adv = torch.tensor([
        [0.0, 0.0, 0.0],   # row 0: zero everywhere            -> skipped
        [0.5, 0.5, 0.0],   # row 1: signal on valid tokens     -> kept
        [0.0, 0.0, 2.0],   # row 2: signal only where masked   -> skipped
        [nan, -1.0, 0.0],  # row 3: NaN masked, -1 valid       -> kept
        [-0.0, 0.0, 0.0],  # row 4: negative zero is zero      -> skipped
    ])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0], [1, 1, 0], [0, 1, 1], [1, 1, 1]])
    assert rows_with_signal(adv, mask).tolist() == [1, 3]
    assert rows_with_signal(torch.zeros(2, 3), torch.ones(2, 3)).tolist() == []


def test_rows_with_signal_shapes():
    with pytest.raises(ValueError, match=r"\[B, T\]"):
        rows_with_signal(torch.zeros(2, 3), torch.ones(2, 4))


def test_grpo_groups_with_equal_rewards_are_the_skipped_rows():
    from rl_core.algorithms.advantages import grpo

    # two groups of 3: rewards (1, 1, 1) -> A = 0; (1, 0, 0) -> mean 1/3, std sqrt(1/3): A != 0 on every row
    scores = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0, 0.0])
    mask = torch.ones(6, 4)
    rewards = torch.zeros(6, 4)
    rewards[:, -1] = scores
    adv, _ = grpo(token_level_rewards=rewards, response_mask=mask, index=torch.tensor([0, 0, 0, 1, 1, 1]))
    assert rows_with_signal(adv, mask).tolist() == [3, 4, 5]


def test_skipping_needs_no_other_term_reading_the_row():
    cfg = ActorConfig()
    assert cfg.skip_zero_advantage_rows and cfg.policy_loss == "vanilla"
    assert can_skip_zero_advantage_rows(cfg)
    assert not can_skip_zero_advantage_rows(attrs.evolve(cfg, skip_zero_advantage_rows=False))
    assert not can_skip_zero_advantage_rows(attrs.evolve(cfg, entropy_coeff=0.01))  # the entropy bonus reads every row
    assert not can_skip_zero_advantage_rows(attrs.evolve(cfg, use_kl_loss=True))  # so does the KL loss


def _constant(**_):  # a loss that is not A * f(ratio): its zero-advantage rows still carry a gradient
    raise AssertionError("not called")


@pytest.mark.parametrize("declares, skips", [(True, True), (False, False)])
def test_the_plan_skips_only_for_a_loss_whose_card_says_it_vanishes_with_the_advantage(tmp_path, declares, skips):
    from rl_core.cards import PolicyLossCard, Provider
    from rl_core.plan.resolver import resolve

    from tests.core.test_resolve_once import _config, _minimal_train, _registry

    theirs = PolicyLossCard(name="theirs", factory=_constant, skips_zero_advantage=declares, provider=Provider(distribution="third-party"))
    registry = _registry(train=[_minimal_train()], policy_loss=[theirs])
    stack, problems = resolve(_config(tmp_path, actor__policy_loss="theirs"), registry)
    assert stack is not None, [p.render() for p in problems]
    assert stack.config.actor.skip_zero_advantage_rows is skips and can_skip_zero_advantage_rows(stack.config.actor) is skips
    stack, _ = resolve(_config(tmp_path), registry)  # rl-core's vanilla declares it
    assert stack.config.actor.skip_zero_advantage_rows and stack.policy_loss.skips_zero_advantage
