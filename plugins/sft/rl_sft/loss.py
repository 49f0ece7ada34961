"""The SFT loss: token-weighted cross-entropy of the trained tokens (a policy loss, ``actor.policy_loss=sft``).

Per micro-batch ``agg_loss(-log_prob, loss_mask, loss_agg_mode)``; core's update weights each micro-batch by its
share of the global mini-batch's tokens (``token-mean``, the default), so the step's loss is the sum of every
trained token's negative log-likelihood over the number of trained tokens in the mini-batch, on every rank, however
the batch is split. The advantages and old log-probs the policy-loss hook passes are not read.
"""

from __future__ import annotations

from rl_core.algorithms.aggregation import agg_loss


def sft_loss(*, log_prob, response_mask, loss_agg_mode: str = "token-mean", options=None, **_unused):
    """``(loss, metrics)``: the negative log-likelihood of the masked tokens, aggregated by ``loss_agg_mode``."""
    nll = agg_loss(-log_prob, response_mask, loss_agg_mode)
    return nll, {}
