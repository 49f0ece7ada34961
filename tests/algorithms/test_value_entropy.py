"""Value loss, entropy and log-probs by hand."""

import math

import pytest
import torch
from rl_core.algorithms.entropy import entropy_from_logits, logprobs_from_logits
from rl_core.algorithms.value_loss import value_loss

from ._helpers import NAN, close, t


def test_value_loss_by_hand():
    # cliprange 0.2
    # t0: V=1.0, V_old=0.5, R=1.5: V_clip = 0.5 + clip(0.5) = 0.7; err = 0.25, err_clip = 0.64 -> 0.64 (clipped)
    # t1: V=2.0, V_old=1.0, R=1.0: V_clip = 1.2; err = 1.0, err_clip = 0.04 -> 1.0
    # t2: V=0.0, V_old=0.5, R=0.0: V_clip = 0.3; err = 0.0, err_clip = 0.09 -> 0.09 (clipped)
    # token-mean = (0.64 + 1 + 0.09) / 3 = 0.5766667; times 0.5 = 0.2883333; vf_clipfrac = 2/3
    vpreds = t([[1.0, 2.0, 0.0, NAN]]).requires_grad_()
    values = t([[0.5, 1.0, 0.5, NAN]])
    returns = t([[1.5, 1.0, 0.0, 99.0]])
    mask = t([[1, 1, 1, 0]])
    loss, m = value_loss(vpreds=vpreds, values=values, returns=returns, response_mask=mask, cliprange_value=0.2)
    close(loss, 0.5 * 1.73 / 3)
    close(m["vf_clipfrac"], 2 / 3)
    loss.backward()
    # gradient 0.5 * d/dV / 3: t0 clipped branch is constant in V (V - V_old beyond the range) -> 0;
    # t1: 0.5 * 2 * (2 - 1) / 3 = 1/3; t2: clipped -> 0; t3 masked -> 0
    close(vpreds.grad, [[0.0, 1 / 3, 0.0, 0.0]])


def test_value_loss_bad_mode():
    with pytest.raises(ValueError, match="seq-mean-token-mean"):
        value_loss(vpreds=t([[1.0]]), values=t([[1.0]]), returns=t([[1.0]]), response_mask=t([[1]]),
                   loss_agg_mode="sum")


def test_entropy_by_hand():
    # [0, 0]: uniform over 2 -> ln 2 = 0.6931472
    # [0, ln 3]: p = [1/4, 3/4]: H = 0.25 ln 4 + 0.75 ln(4/3) = 0.3465736 + 0.2157616 = 0.5623351
    # [1000, 1000]: still ln 2 (no overflow); [0, -inf]: a point mass -> 0
    logits = t([[0.0, 0.0], [0.0, math.log(3)], [1000.0, 1000.0], [0.0, float("-inf")]])
    close(entropy_from_logits(logits), [math.log(2), 0.25 * math.log(4) + 0.75 * math.log(4 / 3), math.log(2), 0.0])


def test_entropy_matches_naive_and_chunks():
    torch.manual_seed(0)
    logits = torch.randn(2, 3, 11) * 3
    p = torch.softmax(logits.double(), -1)
    naive = -(p * p.log()).sum(-1)
    out = entropy_from_logits(logits)
    assert out.shape == (2, 3) and out.dtype == torch.float32
    torch.testing.assert_close(out.double(), naive, atol=1e-5, rtol=0)
    torch.testing.assert_close(entropy_from_logits(logits, chunk_size=4), out)
    torch.testing.assert_close(entropy_from_logits(logits.bfloat16()), entropy_from_logits(logits.bfloat16().float()))


def test_logprobs_from_logits():
    # [0, ln 3], label 1: ln(3/4) = -0.2876821; label 0: ln(1/4) = -1.3862944
    logits = t([[[0.0, math.log(3)], [0.0, math.log(3)]]])
    labels = torch.tensor([[1, 0]])
    close(logprobs_from_logits(logits, labels), [[math.log(0.75), math.log(0.25)]])
    close(logprobs_from_logits(logits, labels, chunk_size=1), [[math.log(0.75), math.log(0.25)]])
    with pytest.raises(ValueError, match="labels"):
        logprobs_from_logits(logits, torch.tensor([1, 0]))
