"""DAPO's overlong-response penalty (``reward.overlong_penalty.*``; verl's ``reward_kwargs.overlong_buffer_cfg``).

A response of ``n`` tokens, with maximum length ``M`` and buffer ``L``, gets

    penalty(n) = min(0, -(n - (M - L)) / L * penalty_factor)

added to its reward: nothing up to ``M - L`` tokens, then a linear slope reaching ``-penalty_factor`` at ``M``.
The trainer applies it to training rewards (the greedy baseline's too), not to validation scores: validation
reports the task's own score, as verl's ``acc``. Registered as a reward shaper (:class:`rl_core.cards.RewardShapingCard`,
turned on by ``reward.overlong_penalty.enable``): :func:`make`.
"""

from __future__ import annotations

from typing import Any

import attrs
import torch


def overlong_penalty(lengths: torch.Tensor, *, max_length: int, buffer_length: int, penalty_factor: float) -> torch.Tensor:
    """The penalty (<= 0) of responses of ``lengths`` tokens, as float32."""
    if buffer_length <= 0:
        raise ValueError(f"the overlong buffer must be positive, got {buffer_length}")
    expected = max_length - buffer_length
    over = lengths.to(torch.float32) - expected
    return torch.clamp(-over / buffer_length * penalty_factor, max=0.0)


@attrs.frozen
class OverlongPenalty:
    max_length: int
    buffer_length: int
    penalty_factor: float
    log: bool

    @classmethod
    def from_config(cls, config: Any) -> "OverlongPenalty | None":
        """From a RunConfig; None when ``reward.overlong_penalty.enable`` is false."""
        o = config.reward.overlong_penalty
        if not o.enable:
            return None
        return cls(o.max_response_length or config.data.max_response_length, int(o.buffer_length), float(o.penalty_factor), bool(o.log))

    def apply(self, scores: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        """``(scores + penalty, metrics)`` for responses of ``lengths`` tokens (:func:`response_lengths`).

        Metrics (with ``log``): ``reward/overlong_penalty_mean`` and ``reward/overlong_fraction`` (responses penalised).
        """
        penalty = overlong_penalty(
            lengths, max_length=self.max_length, buffer_length=self.buffer_length, penalty_factor=self.penalty_factor
        )
        metrics: dict[str, float] = {}
        if self.log and penalty.numel():
            metrics["reward/overlong_penalty_mean"] = penalty.mean().item()
            metrics["reward/overlong_fraction"] = (penalty < 0).float().mean().item()
        return scores.to(torch.float32) + penalty, metrics


    def __call__(self, scores: torch.Tensor, batch: Any) -> tuple[torch.Tensor, dict[str, float]]:
        """The reward shaper's call: :meth:`apply` with the batch's :func:`response_lengths`."""
        return self.apply(scores, response_lengths(batch))


def make(config: Any) -> OverlongPenalty | None:
    """The RewardShapingCard's factory: the penalty of ``config`` (the plan builds it only when enabled)."""
    return OverlongPenalty.from_config(config)


def response_lengths(batch: Any) -> torch.Tensor:
    """Each row's response length as verl counts it: its real response tokens (``attention_mask`` over the response
    columns), a multi-turn row's tool outputs included."""
    width = batch["responses"].shape[1]
    return batch["attention_mask"][:, -width:].sum(-1) if width else torch.zeros(len(batch), dtype=torch.long)
