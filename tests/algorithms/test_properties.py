"""Property tests (hypothesis): invariants that must hold for any input."""


import pytest
import torch

hypothesis = pytest.importorskip("hypothesis", reason="hypothesis is in rl-core's [test] extra")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from rl_core.algorithms import advantages as A  # noqa: E402
from rl_core.algorithms.aggregation import LOSS_AGG_MODES, agg_loss  # noqa: E402
from rl_core.algorithms.policy_loss import dual_clip, ppo_clip  # noqa: E402

FAST = settings(max_examples=50, deadline=None)
reward = st.floats(-10, 10, allow_nan=False, width=32)


@st.composite
def grouped_batch(draw, min_t=1, max_t=5):
    """Rewards [B, T], mask [B, T] (first token always valid, gaps allowed), group index [B], values [B, T]."""
    sizes = draw(st.lists(st.integers(1, 5), min_size=1, max_size=4))
    b = sum(sizes)
    length = draw(st.integers(min_t, max_t))
    index = torch.tensor([g for g, n in enumerate(sizes) for _ in range(n)])
    cells = st.lists(reward, min_size=b * length, max_size=b * length)
    rewards = torch.tensor(draw(cells)).reshape(b, length)
    values = torch.tensor(draw(cells)).reshape(b, length)
    bits = draw(st.lists(st.booleans(), min_size=b * length, max_size=b * length))
    mask = torch.tensor(bits).reshape(b, length)
    mask[:, 0] = True
    perm = torch.tensor(draw(st.permutations(range(b))))  # groups need not be contiguous
    return rewards[perm], mask[perm], index[perm], values[perm]


@FAST
@given(grouped_batch(), st.booleans())
def test_grpo_zero_mean_per_group(batch, norm):
    rewards, mask, index, _ = batch
    adv, _ = A.grpo(token_level_rewards=rewards, response_mask=mask, index=index, options={"norm_adv_by_std": norm, "zero_singleton_groups": True})
    per_seq = adv[:, 0]  # token 0 is always valid and the advantage is constant along a row
    assert torch.isfinite(adv).all()
    for g in index.unique():
        members = per_seq[index == g]
        scale = 1.0 if norm else max(1.0, float(rewards.abs().max()) * rewards.shape[1])
        assert abs(float(members.mean())) <= 1e-4 * scale
        if members.numel() == 1:
            assert members.item() == 0.0


@FAST
@given(grouped_batch())
def test_gae_gamma_lam_one_is_reward_to_go_minus_values(batch):
    rewards, mask, _, values = batch
    adv, ret = A.gae(token_level_rewards=rewards, response_mask=mask, values=values, gamma=1.0, lam=1.0,
                     options={"whiten": False})
    # naive reward-to-go over the valid tokens of each row
    expected = torch.zeros_like(rewards)
    for i in range(rewards.shape[0]):
        running = 0.0
        for j in reversed(range(rewards.shape[1])):
            if mask[i, j]:
                running += float(rewards[i, j])
                expected[i, j] = running
    torch.testing.assert_close(ret, expected, atol=1e-3, rtol=1e-5)
    torch.testing.assert_close(adv, torch.where(mask, ret - values, torch.zeros(())), atol=1e-3, rtol=1e-5)


ESTIMATORS = {"gae": dict(gamma=0.9, lam=0.8), "grpo": {}}  # rl-algorithms' estimators: plugins/algorithms/tests


def _garbage(x, mask, fill):
    return torch.where(mask, x, torch.full_like(x, fill))


def no_leak_into_estimator(batch, name, fill, kwargs, registry=None):
    """The estimator ``name`` gives the same outputs whatever the masked positions hold, and 0 there."""
    rewards, mask, index, values = batch
    card = None if registry is None else registry.get("estimator", name)  # a plugin's estimator: its card
    kwargs = dict(response_mask=mask, index=index, baseline_rewards=values[:, 0], card=card, **kwargs)
    a1, r1 = A.compute_advantage(name, token_level_rewards=rewards, values=values, **kwargs)
    a2, r2 = A.compute_advantage(name, token_level_rewards=_garbage(rewards, mask, fill),
                                 values=_garbage(values, mask, fill), **kwargs)
    assert torch.equal(a1, a2) and torch.equal(r1, r2)
    assert torch.all(a1[~mask] == 0) and torch.all(r1[~mask] == 0)
    assert torch.isfinite(a1).all() and torch.isfinite(r1).all()


@FAST
@given(grouped_batch(), st.sampled_from(sorted(ESTIMATORS)), st.sampled_from([float("nan"), float("inf"), 1e6, -3.0]))
def test_masked_positions_never_leak_into_estimators(batch, name, fill):
    no_leak_into_estimator(batch, name, fill, ESTIMATORS[name])


def no_leak_into_loss(batch, loss_fn, mode, fill):
    """The loss, its gradient and metrics are the same whatever the masked positions hold; the gradient 0 there."""
    rewards, mask, _, values = batch
    old = values * 0.05
    new = old + rewards * 0.02
    results = []
    for garbage in (False, True):
        lp = (_garbage(new, mask, fill) if garbage else new).clone().requires_grad_()
        kwargs = dict(
            old_log_prob=_garbage(old, mask, fill) if garbage else old,
            advantages=_garbage(rewards, mask, fill) if garbage else rewards,
            response_mask=mask,
            loss_agg_mode=mode,
        )
        loss, metrics = loss_fn(log_prob=lp, **kwargs)
        (grad,) = torch.autograd.grad(loss, lp)
        results.append((loss, metrics, grad))
    (l1, m1, g1), (l2, m2, g2) = results
    assert torch.isfinite(l1) and torch.equal(l1, l2)
    assert torch.equal(g1, g2) and torch.all(g1[~mask] == 0)
    assert all(torch.equal(m1[k], m2[k]) for k in m1)


@FAST
@given(grouped_batch(), st.sampled_from([ppo_clip, dual_clip]), st.sampled_from(LOSS_AGG_MODES), st.sampled_from([float("nan"), 1e6, -7.0]))
def test_masked_positions_never_leak_into_losses(batch, loss_fn, mode, fill):
    no_leak_into_loss(batch, loss_fn, mode, fill)


@FAST
@given(grouped_batch(), st.sampled_from(LOSS_AGG_MODES))
def test_agg_loss_ignores_masked_values(batch, mode):
    rewards, mask, _, _ = batch
    assert torch.equal(agg_loss(rewards, mask, mode), agg_loss(_garbage(rewards, mask, float("nan")), mask, mode))
