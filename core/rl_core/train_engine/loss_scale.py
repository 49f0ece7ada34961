"""Dynamic loss scaling for ``model.dtype=float16`` (5 exponent bits: gradients below ~6e-8 flush to zero, above 65504
overflow), as megatron-core's ``DynamicGradScaler``: an overflowing mini-batch skips its step and lowers the scale,
``interval`` finite steps raise it; docs/plugins.md ("A train backend"). The state is part of the role's checkpoint."""

from __future__ import annotations

import math
from typing import Any

import attrs

#: torch.amp.GradScaler's start; megatron-core starts at 2**32 and reaches the same region after a few skips
INITIAL_SCALE = 2.0**16
GROWTH = 2.0
BACKOFF = 0.5
#: finite steps in a row before the scale grows (megatron-core's loss_scale_window)
INTERVAL = 1000
MIN_SCALE = 1.0
#: the key of the scaler's state inside the scheduler state a backend saves
STATE_KEY = "loss_scaler"


@attrs.define
class LossScaler:
    scale: float = INITIAL_SCALE
    growth: float = GROWTH
    backoff: float = BACKOFF
    interval: int = INTERVAL
    min_scale: float = MIN_SCALE
    good_steps: int = 0  # finite steps since the last change of the scale
    skipped: int = 0  # skipped steps over the run

    def at_floor(self) -> bool:
        return self.scale <= self.min_scale

    def update(self, grad_norm: float) -> bool:
        """Record a mini-batch's (global) gradient norm; whether the optimizer steps on it."""
        if not math.isfinite(grad_norm):
            self.scale = max(self.scale * self.backoff, self.min_scale)
            self.good_steps = 0
            self.skipped += 1
            return False
        self.good_steps += 1
        if self.good_steps >= self.interval:
            self.scale *= self.growth
            self.good_steps = 0
        return True

    def state_dict(self) -> dict[str, Any]:
        return {"scale": float(self.scale), "good_steps": int(self.good_steps), "skipped": int(self.skipped)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.scale, self.good_steps, self.skipped = float(state["scale"]), int(state["good_steps"]), int(state["skipped"])


def for_backend(trainable: bool, dtype_name: str) -> LossScaler | None:
    """A scaler for a trainable role computing in float16; None otherwise (float32 / bfloat16 need none)."""
    return LossScaler() if trainable and dtype_name == "float16" else None


def with_state(scheduler: dict[str, Any] | None, scaler: LossScaler | None) -> dict[str, Any] | None:
    """The scheduler state a backend saves, with the scaler's added (unchanged without a scaler)."""
    if scheduler is None or scaler is None:
        return scheduler
    return {**scheduler, STATE_KEY: scaler.state_dict()}


def restore(state: dict[str, Any] | None, scaler: LossScaler | None) -> dict[str, Any] | None:
    """The scheduler state without the scaler's, which is loaded into ``scaler`` (a checkpoint of a run without one
    leaves ``scaler`` at its start)."""
    if state is None or STATE_KEY not in state:
        return state
    state = dict(state)
    saved = state.pop(STATE_KEY)
    if scaler is not None:
        scaler.load_state_dict(saved)
    return state


def add_metrics(out: dict[str, float], scaler: LossScaler | None, norms: list[float]) -> None:
    """An update's metrics with ``loss_scale`` and ``loss_scale_skipped_steps``; ``grad_norm`` averages the steps taken
    (a skipped step's norm is NaN) and is left out when every step was skipped. Nothing without a scaler."""
    if scaler is None:
        return
    taken = [n for n in norms if not math.isnan(n)]
    out.update(loss_scale=scaler.scale, loss_scale_skipped_steps=len(norms) - len(taken))
    if taken:
        out["grad_norm"] = sum(taken) / len(taken)
    else:
        out.pop("grad_norm", None)
