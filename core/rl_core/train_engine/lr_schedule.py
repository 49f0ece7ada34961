"""The train engines' learning-rate schedule: linear warmup, then constant / cosine / linear decay.

:class:`rl_core.train_engine.engine.RoleEngine` wraps :class:`LRSchedule` in a
``torch.optim.lr_scheduler.LambdaLR``. The scheduler advances once per ``update()`` call (one trainer step, all
its epochs and mini-batches), as in verl; ``update`` number ``k`` (0-based)
runs at ``lr * lr_factor(k)``:

- warmup (``W`` steps): ``(k + 1) / W`` for ``k < W``, so the first update
  already moves (verl's ``k / W`` spends the first step at lr 0);
- then ``constant``: 1; ``cosine``: ``m + (1 - m) * (1 + cos(pi * p)) / 2``;
  ``linear``: ``m + (1 - m) * (1 - p)``, where ``m = min_lr_ratio`` and
  ``p = (k - W) / (T - W)`` clamped to ``[0, 1]``, ``T`` the total number of
  updates. ``optim.min_lr`` (absolute, verl's Megatron ``min_lr``) sets
  ``m = min_lr / lr``: the decay then runs from ``lr`` to ``min_lr`` as
  megatron-core's ``OptimizerParamScheduler`` does (``min_lr + coeff * (lr - min_lr)``).

``W`` is ``optim.lr_warmup_steps`` if positive, else
``int(optim.lr_warmup_steps_ratio * T)``. ``T`` comes from
``engine.set_total_steps(T)`` or ``trainer.total_training_steps``; a
schedule that needs it and does not have it raises a clear error.
"""

from __future__ import annotations

import math

from rl_core.config.schema import OptimConfig
from rl_core.problems import UserError


class ScheduleError(UserError, ValueError):
    """An LR schedule that cannot be computed from the config."""


class LRSchedule:
    """A picklable ``LambdaLR`` lambda whose total can be set after construction."""

    def __init__(self, optim: OptimConfig, total_steps: int | None = None, *, section: str = "actor.optim") -> None:
        self.optim = optim
        self.total_steps = total_steps
        self.section = section

    def _need_total(self, why: str) -> int:
        if not self.total_steps:
            raise ScheduleError(
                f"{self.section}: {why} needs the total number of training steps; call engine.set_total_steps(n) "
                f"(the trainer does) or set trainer.total_training_steps"
            )
        return int(self.total_steps)

    def warmup_steps(self) -> int:
        if self.optim.lr_warmup_steps and self.optim.lr_warmup_steps > 0:
            return int(self.optim.lr_warmup_steps)
        if self.optim.lr_warmup_steps_ratio and self.optim.lr_warmup_steps_ratio > 0:
            total = self._need_total(f"lr_warmup_steps_ratio={self.optim.lr_warmup_steps_ratio}")
            return int(self.optim.lr_warmup_steps_ratio * total)
        return 0

    def __call__(self, step: int) -> float:
        warmup = self.warmup_steps()
        if step < warmup:
            return (step + 1) / warmup
        kind = self.optim.lr_scheduler
        if kind == "constant" or step == warmup:
            return 1.0
        total = self._need_total(f"lr_scheduler={kind!r}")
        progress = min(1.0, max(0.0, (step - warmup) / max(1, total - warmup)))
        floor = min_lr_fraction(self.optim)
        if kind == "cosine":
            return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))
        if kind == "linear":
            return floor + (1.0 - floor) * (1.0 - progress)
        raise ScheduleError(f"{self.section}.lr_scheduler={kind!r} is not supported; use constant, cosine or linear")


def min_lr_fraction(optim: OptimConfig) -> float:
    """The decay's end as a fraction of ``lr``: ``min_lr / lr`` when ``min_lr`` is set, else ``min_lr_ratio``."""
    if optim.min_lr is None:
        return float(optim.min_lr_ratio)
    return float(optim.min_lr) / float(optim.lr)
