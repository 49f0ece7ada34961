"""Registers the built-in estimators and policy losses through the public hooks.

This module is the ``builtin_algorithms`` entry point; it imports no torch:
factories are dotted paths loaded on first use. A third-party package
registers its own estimator exactly the same way::

    from rl_core import hookimpl
    from rl_core.cards import EstimatorCard

    @hookimpl
    def rl_core_register_advantage_estimators(register):
        register(EstimatorCard(name="my_est", factory="my_pkg.adv:my_est", needs_groups=True))
"""

from __future__ import annotations

from rl_core import hookimpl
from rl_core.cards import EstimatorCard, PolicyLossCard

_ADV = "rl_core.algorithms.advantages"
_PG = "rl_core.algorithms.policy_loss"


@hookimpl
def rl_core_register_advantage_estimators(register):
    register(EstimatorCard(
        name="gae", factory=f"{_ADV}:gae", needs_critic=True, level="token",
        description="Generalised Advantage Estimation with a critic (PPO; Schulman et al. 2015)",
    ))
    register(EstimatorCard(
        name="grpo", factory=f"{_ADV}:grpo", needs_groups=True, level="sequence",
        description="group-normalised outcome advantage (DeepSeekMath 2024); norm_adv_by_std=False is Dr. GRPO",
    ))
    register(EstimatorCard(
        name="rloo", factory=f"{_ADV}:rloo", needs_groups=True, level="sequence",
        description="REINFORCE leave-one-out baseline (Ahmadian et al. 2024)",
    ))
    register(EstimatorCard(
        name="reinforce_plus_plus", factory=f"{_ADV}:reinforce_plus_plus", level="token",
        description="discounted return-to-go, normalised over the batch (REINFORCE++, Hu 2025)",
    ))
    register(EstimatorCard(
        name="reinforce_plus_plus_baseline", factory=f"{_ADV}:reinforce_plus_plus_baseline",
        needs_groups=True, level="sequence",
        description="group-mean baseline, then batch normalisation (REINFORCE++-baseline, Hu 2025)",
    ))
    register(EstimatorCard(
        name="remax", factory=f"{_ADV}:remax", needs_greedy_baseline=True, level="token",
        description="return minus the greedy response's reward (ReMax, Li et al. 2023)",
    ))


@hookimpl
def rl_core_register_policy_losses(register):
    register(PolicyLossCard(
        name="ppo_clip", factory=f"{_PG}:ppo_clip", level="token",
        description="PPO clipped surrogate with separate low/high ranges (PPO 2017; DAPO clip-higher 2025)",
    ))
    register(PolicyLossCard(
        name="dual_clip", factory=f"{_PG}:dual_clip", level="token",
        description="dual-clip PPO: caps the loss of negative-advantage tokens at -A*clip_ratio_c (Ye et al. 2020)",
    ))
    register(PolicyLossCard(
        name="gspo", factory=f"{_PG}:gspo", level="sequence",
        description="sequence-level importance ratio and clipping (GSPO, Zheng et al. 2025)",
    ))
