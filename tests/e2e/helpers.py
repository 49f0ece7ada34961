"""A tiny end-to-end run: random tiny model, a few prompts, a rule reward with variance (rl_core.testing.tiny_run)."""

from __future__ import annotations

from rl_core.testing.tiny_run import REWARD, read_metrics, write_tiny_run

__all__ = ["REWARD", "read_metrics", "write_tiny_run"]
