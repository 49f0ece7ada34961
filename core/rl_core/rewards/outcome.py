"""What a scorer returns per sample (the reward manager, rl-reward-pool's workers, rl-reward-model's scorers)."""

from __future__ import annotations

from typing import NamedTuple

OK, ERROR, TIMEOUT = "ok", "error", "timeout"


class Outcome(NamedTuple):
    """How one sample went: ``status`` is ``ok``, ``error`` or ``timeout``."""

    status: str
    score: float = 0.0
    extras: dict | None = None
    error: str = ""
    detail: str = ""  # the worker's traceback, for errors
