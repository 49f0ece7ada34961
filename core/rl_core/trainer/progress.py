"""A live training progress bar (tqdm): step / total, ETA and a few key metrics; only on a terminal unless ``enable``
says otherwise.
"""

from __future__ import annotations

import sys
from typing import Any, Mapping

from tqdm import tqdm

from rl_core.trainer.tracking import format_metric, key_metrics

PROGRESS_GROUPS = ("reward", "validation", "response_length", "mismatch", "step_time")


class ProgressBar:
    """``update(step, metrics)`` after each step, ``close()`` at the end; ``initial``: a resumed run's start step (the
    ETA counts only the steps still to do)."""

    def __init__(self, total: int | None, initial: int = 0, enable: bool | None = None, desc: str = "train") -> None:
        if total is not None and total < 0:
            raise ValueError(f"progress total must be >= 0 or None, got {total}")
        if enable is None:
            enable = bool(getattr(sys.stderr, "isatty", lambda: False)())
        self.enabled = enable
        self._step = initial
        self._bar = tqdm(total=total, initial=initial, desc=desc, unit="step", dynamic_ncols=True, disable=not enable)

    def update(self, step: int, metrics: Mapping[str, float] | None = None) -> None:
        """Move to ``step`` (absolute) and show the key metrics of ``metrics``."""
        if metrics:
            shown = key_metrics(metrics, PROGRESS_GROUPS)
            self._bar.set_postfix({k: format_metric(float(v)) for k, v in shown.items()}, refresh=False)
        self._bar.update(max(step - self._step, 0))
        self._step = max(step, self._step)

    def write(self, text: str) -> None:
        """Print a line without breaking the bar."""
        if self.enabled:
            self._bar.write(text)
        else:
            print(text)

    def close(self) -> None:
        self._bar.close()

    def __enter__(self) -> "ProgressBar":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
