"""Clipped value loss for the PPO critic (OpenAI baselines' PPO2 and verl; the PPO paper uses a plain squared error)."""

from __future__ import annotations

import torch
from torch import Tensor

from rl_core.algorithms.aggregation import agg_loss, check_loss_agg_mode
from rl_core.algorithms.masked import (
    bool_mask,
    check_same_shape,
    masked_mean,
    zero_masked,
)


def value_loss(
    *,
    vpreds: Tensor,
    values: Tensor,
    returns: Tensor,
    response_mask: Tensor,
    cliprange_value: float = 0.5,
    loss_agg_mode: str = "token-mean",
) -> tuple[Tensor, dict[str, Tensor]]:
    """``0.5 * agg(max((V - R)^2, (V_clip - R)^2))``, ``V_clip = V_old + clip(V - V_old, -c, c)``: ``vpreds`` V (with grad),
    ``values`` V_old, ``returns`` R, all ``[B, T]``. Returns the 0-d loss and ``vf_clipfrac`` (clipped error larger)."""
    check_loss_agg_mode(loss_agg_mode)
    for name, x in (("vpreds", vpreds), ("values", values), ("returns", returns)):
        check_same_shape(name, x, response_mask)
    if cliprange_value < 0:
        raise ValueError(f"cliprange_value must be >= 0, got {cliprange_value}")
    mask = bool_mask(response_mask)
    v = zero_masked(vpreds, mask).float()
    v_old = zero_masked(values.detach(), mask).float()
    ret = zero_masked(returns.detach(), mask).float()
    v_clipped = v_old + (v - v_old).clamp(-cliprange_value, cliprange_value)
    err = (v - ret).square()
    err_clipped = (v_clipped - ret).square()
    loss = 0.5 * agg_loss(torch.maximum(err, err_clipped), mask, loss_agg_mode)
    return loss, {"vf_clipfrac": masked_mean((err_clipped > err).float(), mask).detach()}
