"""The algorithm library: pure tensor functions, no distributed imports (docs/algorithms.md). The names below load on
first access, so importing the package (the ``builtin`` entry point) does not import torch."""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "compute_advantage": "advantages",
    "group_index": "advantages",
    "reward_to_go": "advantages",
    "agg_loss": "aggregation",
    "LOSS_AGG_MODES": "options",
    "kl_penalty": "kl",
    "apply_kl_penalty": "kl",
    "FixedKLController": "kl",
    "AdaptiveKLController": "kl",
    "kl_controller_from_config": "kl",
    "entropy_from_logits": "entropy",
    "logprobs_from_logits": "entropy",
    "compute_actor_loss": "actor_loss",
    "compute_critic_loss": "actor_loss",
    "get_policy_loss": "actor_loss",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
