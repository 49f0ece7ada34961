"""The algorithm library: pure tensor functions, no distributed imports.

==============================  ==============================================
module                          what
==============================  ==============================================
``advantages``                  estimators (gae, grpo, rloo, reinforce++,
                                reinforce++-baseline, remax), ``compute_advantage``
``group_baselines``             opo, grpo_passk, gpg, rloo_vectorized
``policy_loss``                 ppo_clip, dual_clip (= verl's vanilla), gspo
``policy_loss_pg``              gpg, dro, cispo, sapo, geo_mean, dppo_tv, dppo_kl
``policy_loss_cov``             clip_cov, kl_cov
``rollout_correction``          rollout IS weights, rejection, mismatch metrics
``aggregation``                 ``agg_loss`` and the loss_agg_mode values
``kl``                          KL estimators, KL controllers, KL-in-reward
``value_loss``                  clipped critic loss
``entropy``                     entropy / log-probs from logits
``actor_loss``                  ``compute_actor_loss`` / ``compute_critic_loss``
``metrics``                     advantage / return statistics
``group_filter``                DAPO's group filter (groups of equal scores)
``builtin``                     registers the built-ins through the public hooks
==============================  ==============================================

The names below are importable from ``rl_core.algorithms`` directly; they are
loaded on first access so that importing the package (e.g. for the
``builtin`` entry point) does not import torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "compute_advantage": "advantages",
    "group_index": "advantages",
    "reward_to_go": "advantages",
    "agg_loss": "aggregation",
    "LOSS_AGG_MODES": "aggregation",
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
    "advantage_metrics": "metrics",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
