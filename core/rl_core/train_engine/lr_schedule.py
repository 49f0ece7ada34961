"""The train engines' learning-rate schedule: linear warmup, then constant / cosine / linear decay, one step per
``update()`` (docs/plugins.md, "A train backend", has the formula). The warmup is ``(k + 1) / W``, so the first update
already moves (verl's ``k / W`` spends it at lr 0)."""

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
