"""Rewards: the reward manager (scorer choice, process pool, timeouts) and helpers.

This package is imported by the pool's worker processes, so importing it stays
cheap: :mod:`rl_core.rewards.manager` (which needs torch) loads on first use.
"""

from __future__ import annotations

from typing import Any

__all__ = ["RewardManager", "RewardConfigError", "RewardError", "scores_to_token_level"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from rl_core.rewards import manager

        return getattr(manager, name)
    raise AttributeError(f"module 'rl_core.rewards' has no attribute {name!r}")
