"""agg_loss modes against values worked out by hand."""

import pytest
import torch
from rl_core.algorithms.aggregation import LOSS_AGG_MODES, agg_loss

from ._helpers import NAN, close, t

# row 0: valid [1, 2], row 1: valid [4], row 2: all masked (padding row; NaN garbage)
LOSS = t([[1, 2, 3], [4, 5, 6], [NAN, 8, 9]])
MASK = t([[1, 1, 0], [1, 0, 0], [0, 0, 0]])


@pytest.mark.parametrize(
    "mode, expected",
    [
        ("token-mean", 7 / 3),  # (1 + 2 + 4) / 3 valid tokens
        ("seq-mean-token-sum", 3.5),  # ((1 + 2) + 4) / 2 non-empty sequences
        ("seq-mean-token-mean", 2.75),  # ((1 + 2)/2 + 4/1) / 2 = (1.5 + 4) / 2
        ("seq-mean-token-sum-norm", 7 / 6),  # ((1 + 2)/3 + 4/3) / 2, T = 3
    ],
)
def test_modes_by_hand(mode, expected):
    loss = agg_loss(LOSS, MASK, mode)
    assert loss.dim() == 0 and loss.dtype == torch.float32
    close(loss, expected)


def test_norm_length_and_denominator():
    # Dr. GRPO constant: ((1 + 2)/10 + 4/10) / 2 = 0.35
    close(agg_loss(LOSS, MASK, "seq-mean-token-sum-norm", norm_length=10), 0.35)
    # global token count 14 instead of the local 3: (1 + 2 + 4) / 14 = 0.5
    close(agg_loss(LOSS, MASK, "token-mean", denominator=14), 0.5)
    # global sequence count 7 instead of 2: (3 + 4) / 7 = 1
    close(agg_loss(LOSS, MASK, "seq-mean-token-sum", denominator=torch.tensor(7.0)), 1.0)


def test_bad_mode_names_the_allowed_values():
    with pytest.raises(ValueError) as err:
        agg_loss(LOSS, MASK, "seq-mean")
    for mode in LOSS_AGG_MODES:
        assert mode in str(err.value)


def test_all_masked_is_zero_with_zero_grad():
    x = t([[NAN, 2.0]]).requires_grad_()
    for mode in LOSS_AGG_MODES:
        loss = agg_loss(x, t([[0, 0]]), mode)
        assert loss.item() == 0.0
        (g,) = torch.autograd.grad(loss, x)
        assert torch.equal(g, torch.zeros_like(g))


def test_gradient_weights():
    # token-mean: every valid token weighs 1/3; seq-mean-token-mean: row 0 tokens 1/4 each, row 1 token 1/2
    x = torch.zeros(2, 3, requires_grad=True)
    mask = MASK[:2]
    (g,) = torch.autograd.grad(agg_loss(x, mask, "token-mean"), x)
    close(g, [[1 / 3, 1 / 3, 0], [1 / 3, 0, 0]])
    (g,) = torch.autograd.grad(agg_loss(x, mask, "seq-mean-token-mean"), x)
    close(g, [[1 / 4, 1 / 4, 0], [1 / 2, 0, 0]])


def test_bf16_loss_matrix():
    close(agg_loss(LOSS[:2].bfloat16(), MASK[:2], "token-mean"), 7 / 3)


def test_float_weights_in_token_mean():
    # weights [1, 0.5] on [1, 2]: (1 + 1) / 1.5 = 4/3
    close(agg_loss(t([[1, 2]]), t([[1, 0.5]]), "token-mean"), 4 / 3)
