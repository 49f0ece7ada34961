"""Policy losses against values worked out by hand (old_log_prob = 0, so ratio = exp(log_prob))."""

import math

import pytest
import torch
from rl_core.algorithms.policy_loss import dual_clip, ppo_clip

from ._helpers import NAN, close, t

LN = math.log


def _inputs(ratios, advs, pad=False, dtype=torch.float32):
    """One row of tokens with the given ratios; with pad=True, a second row of garbage that is masked."""
    log_prob = t([[LN(r) for r in ratios]])
    adv = t([advs])
    mask = torch.ones_like(log_prob)
    old = torch.zeros_like(log_prob)
    if pad:
        n = len(ratios)
        log_prob = torch.cat([log_prob, t([[NAN] * n])])
        old = torch.cat([old, t([[1e6] * n])])
        adv = torch.cat([adv, t([[NAN] * n])])
        mask = torch.cat([mask, torch.zeros(1, n)])
    return dict(old_log_prob=old.to(dtype), log_prob=log_prob.to(dtype).requires_grad_(), advantages=adv.to(dtype),
                response_mask=mask)


# four tokens covering the four cases of the clipped surrogate (eps = 0.2: clip to [0.8, 1.2]):
#   t0: r=0.5, A=+1: max(-0.5, -0.8) = -0.5   (unclipped)
#   t1: r=1.5, A=+1: max(-1.5, -1.2) = -1.2   (clipped)
#   t2: r=0.5, A=-1: max( 0.5,  0.8) =  0.8   (clipped)
#   t3: r=1.5, A=-1: max( 1.5,  1.2) =  1.5   (unclipped)
RATIOS, ADVS = [0.5, 1.5, 0.5, 1.5], [1.0, 1.0, -1.0, -1.0]
# ppo_kl = mean(old - new) = -(ln .5 + ln 1.5 + ln .5 + ln 1.5) / 4 = -(2*-0.693147 + 2*0.405465)/4 = 0.143841
PPO_KL = -(2 * LN(0.5) + 2 * LN(1.5)) / 4


@pytest.mark.parametrize("pad", [False, True])
def test_ppo_clip_by_hand(pad):
    loss, m = ppo_clip(**_inputs(RATIOS, ADVS, pad=pad), clip_ratio=0.2)
    # token-mean = (-0.5 - 1.2 + 0.8 + 1.5) / 4 = 0.6 / 4 = 0.15
    close(loss, 0.15)
    close(m["clipfrac"], 0.5)  # t1 and t2
    close(m["ppo_kl"], PPO_KL)
    assert "clipfrac_lower" not in m
    assert all(v.dim() == 0 and not v.requires_grad for v in m.values())


def test_ppo_clip_gradient_is_zero_on_clipped_tokens():
    inputs = _inputs(RATIOS, ADVS)
    loss, _ = ppo_clip(**inputs)
    loss.backward()
    # d/dlogp of -A * r / 4 = -A * r / 4 on unclipped tokens: t0: -0.5/4 = -0.125; t3: 1.5/4 = 0.375
    close(inputs["log_prob"].grad, [[-0.125, 0.0, 0.0, 0.375]])


def test_ppo_clip_higher_dapo():
    # eps_low = 0.2, eps_high = 0.28: clip to [0.8, 1.28]
    # t1: max(-1.5, -1.28) = -1.28; others unchanged -> (-0.5 - 1.28 + 0.8 + 1.5) / 4 = 0.52 / 4 = 0.13
    loss, m = ppo_clip(**_inputs(RATIOS, ADVS), clip_ratio=0.2, clip_ratio_high=0.28)
    close(loss, 0.13)
    close(m["clipfrac"], 0.5)
    # only the low side: eps_low = 0.6 -> [0.4, 1.2]; t2: max(0.5, 0.4) = 0.5 now unclipped
    # (-0.5 - 1.2 + 0.5 + 1.5) / 4 = 0.3 / 4 = 0.075
    loss, m = ppo_clip(**_inputs(RATIOS, ADVS), clip_ratio=0.2, clip_ratio_low=0.6)
    close(loss, 0.075)
    close(m["clipfrac"], 0.25)


def test_ppo_clip_seq_mean_token_sum_mode():
    # same four tokens, one sequence: token sum = 0.6; seq-mean over 1 sequence = 0.6
    loss, _ = ppo_clip(**_inputs(RATIOS, ADVS, pad=True), loss_agg_mode="seq-mean-token-sum")
    close(loss, 0.6)


def test_ppo_clip_bf16_inputs():
    # 0.5 / 1.5 ratios through bf16 log-probs: ln(0.5) and ln(1.5) are rounded, so compare loosely
    loss, m = ppo_clip(**_inputs(RATIOS, ADVS, dtype=torch.bfloat16))
    assert loss.dtype == torch.float32
    close(loss, 0.15, atol=5e-3)
    close(m["clipfrac"], 0.5)


def test_bad_arguments():
    with pytest.raises(ValueError, match="token-mean"):
        ppo_clip(**_inputs(RATIOS, ADVS), loss_agg_mode="mean")
    with pytest.raises(ValueError, match="clip_ratio_c > 1"):
        dual_clip(**_inputs(RATIOS, ADVS), clip_ratio_c=1.0)
    with pytest.raises(ValueError, match=">= 0"):
        ppo_clip(**_inputs(RATIOS, ADVS), clip_ratio_low=-0.1)
    bad = _inputs(RATIOS, ADVS)
    bad["advantages"] = bad["advantages"][:, :2]
    with pytest.raises(ValueError, match="advantages"):
        ppo_clip(**bad)


# --------------------------------------------------------------------- dual clip
@pytest.mark.parametrize("pad", [False, True])
def test_dual_clip_by_hand(pad):
    # c = 3
    #   t0: r=0.5, A=+1: -0.5                       (positive advantage: plain PPO)
    #   t1: r=4,   A=-1: PPO max(4, 1.2) = 4 > cap 3 -> 3   (capped: clipfrac_lower)
    #   t2: r=0.5, A=-1: PPO max(0.5, 0.8) = 0.8      (clipped)
    #   t3: r=1.5, A=-1: PPO max(1.5, 1.2) = 1.5 < 3 -> 1.5
    # token-mean = (-0.5 + 3 + 0.8 + 1.5) / 4 = 4.8 / 4 = 1.2
    inputs = _inputs([0.5, 4.0, 0.5, 1.5], [1.0, -1.0, -1.0, -1.0], pad=pad)
    loss, m = dual_clip(**inputs, clip_ratio=0.2, clip_ratio_c=3.0)
    close(loss, 1.2)
    close(m["clipfrac"], 0.25)
    close(m["clipfrac_lower"], 0.25)
    # ppo_kl = -(ln .5 + ln 4 + ln .5 + ln 1.5) / 4 = -ln(0.5 * 4 * 0.5 * 1.5) / 4 = -ln(1.5) / 4 = -0.1013663
    close(m["ppo_kl"], -LN(1.5) / 4)
    loss.backward()
    # gradient: t0: -A r / 4 = -0.125; t1 capped -> 0; t2 clipped -> 0; t3: 1.5 / 4 = 0.375
    close(inputs["log_prob"].grad[0], [-0.125, 0.0, 0.0, 0.375])


def test_dual_clip_leaves_positive_advantages_alone():
    # r = 4, A = +1: PPO gives max(-4, -1.2) = -1.2; dual clip does not touch A > 0
    inputs = _inputs([4.0, 0.5], [1.0, 1.0])
    a, _ = dual_clip(**inputs)
    b, _ = ppo_clip(**_inputs([4.0, 0.5], [1.0, 1.0]))
    close(a, b)
    close(a, (-1.2 - 0.5) / 2)
