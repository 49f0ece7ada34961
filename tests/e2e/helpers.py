"""A tiny end-to-end run: random tiny model, a few prompts, a rule reward with variance (rl_core_testing.tiny_run)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rl_core_testing.tiny_run import REWARD, read_metrics, write_tiny_run

__all__ = ["REWARD", "read_metrics", "train_tiny", "write_tiny_run"]


def train_tiny(tmp: Path, **overrides: Any) -> list[dict[str, Any]]:
    """Write a tiny run under ``tmp`` (``write_tiny_run``'s keywords), train it to the end, return its metric rows."""
    from rl_core.config.load import load_config
    from rl_core.plan.resolver import resolve
    from rl_core.trainer.loop import Trainer

    stack, problems = resolve(load_config(write_tiny_run(tmp, **overrides)))
    assert stack is not None, [p.render() for p in problems]
    trainer = Trainer(stack, progress=False)
    try:
        trainer.fit()
    finally:
        trainer.close()
    return read_metrics(tmp / "out")
