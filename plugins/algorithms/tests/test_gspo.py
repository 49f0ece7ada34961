"""gspo (rl-algorithms) against values worked out by hand and a sequence-level reference written in plain torch."""

import math

import torch
from rl_algorithms.policy_loss_pg import gspo

from tests.algorithms._helpers import NAN, close, t


# -------------------------------------------------------------------------- gspo
def _gspo_inputs():
    # row 0: 2 valid tokens, log ratios [0.2, 0.0]            -> mean 0.1, s0 = e^0.1 = 1.1051709
    # row 1: 3 valid tokens, log ratios [0.6, 0.3, 0.0] + pad -> mean 0.3, s1 = e^0.3 = 1.3498588
    log_prob = t([[0.2, 0.0, NAN, NAN], [0.6, 0.3, 0.0, NAN]]).requires_grad_()
    old = t([[0.0, 0.0, 5.0, 5.0], [0.0, 0.0, 0.0, -7.0]])
    adv = t([[1.0, 1.0, NAN, NAN], [1.0, 1.0, 1.0, NAN]])
    mask = t([[1, 1, 0, 0], [1, 1, 1, 0]])
    return dict(old_log_prob=old, log_prob=log_prob, advantages=adv, response_mask=mask)


def test_gspo_by_hand():
    s0 = math.exp(0.1)
    # eps 0.2: s0 = 1.105 inside [0.8, 1.2] -> each token -s0; s1 = 1.350 > 1.2 -> each token -1.2 (clipped)
    loss, m = gspo(**_gspo_inputs(), loss_agg_mode="seq-mean-token-mean")
    # seq-mean-token-mean = (-s0 + -1.2) / 2 = (-1.1051709 - 1.2) / 2 = -1.1525855
    close(loss, (-s0 - 1.2) / 2)
    close(m["clipfrac"], 3 / 5)  # the three tokens of row 1
    close(m["ppo_kl"], -(0.2 + 0.0 + 0.6 + 0.3 + 0.0) / 5)  # = -0.22
    # token-mean = (2 * -s0 + 3 * -1.2) / 5 = (-2.2103418 - 3.6) / 5 = -1.1620684
    loss, _ = gspo(**_gspo_inputs(), loss_agg_mode="token-mean")
    close(loss, (2 * -s0 - 3 * 1.2) / 5)
    # with the paper's tiny range nothing inside: eps_low=3e-4, eps_high=4e-4 -> both clipped to 1.0004
    loss, m = gspo(**_gspo_inputs(), loss_agg_mode="seq-mean-token-mean", clip_ratio_low=3e-4, clip_ratio_high=4e-4)
    close(loss, -1.0004)
    close(m["clipfrac"], 1.0)


def test_gspo_gradient_equals_sequence_level_objective():
    # GSPO-token with sequence-constant advantages and seq-mean-token-mean has the gradient of
    # J = mean_i min(s_i A_i, clip(s_i) A_i),  s_i = exp(mean_t(log_prob - old)).
    torch.manual_seed(0)
    B, T = 3, 5
    mask = t([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0]])
    old = torch.randn(B, T) * 0.1
    lp = (old + torch.randn(B, T) * 0.05).requires_grad_()
    seq_adv = t([0.7, -1.3, 0.4])
    adv = seq_adv[:, None].expand(B, T).clone()
    loss, _ = gspo(old_log_prob=old, log_prob=lp, advantages=adv, response_mask=mask,
                   loss_agg_mode="seq-mean-token-mean", clip_ratio=0.05)
    (g_ours,) = torch.autograd.grad(loss, lp)

    lp2 = lp.detach().clone().requires_grad_()
    s = torch.exp(((lp2 - old) * mask).sum(-1) / mask.sum(-1))
    ref = -torch.minimum(s * seq_adv, s.clamp(0.95, 1.05) * seq_adv).mean()
    (g_ref,) = torch.autograd.grad(ref, lp2)
    torch.testing.assert_close(loss, ref)
    torch.testing.assert_close(g_ours, g_ref)
