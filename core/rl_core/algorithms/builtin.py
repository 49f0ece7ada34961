"""Registers the built-in estimators (gae, grpo) and policy losses (ppo_clip, dual_clip / vanilla) through the public hooks.

The others (rloo, reinforce++, remax, opo, gspo, cispo, clip_cov, ...) come with the rl-algorithms package
(``plugins/algorithms``), registered through the same hooks.

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
from rl_core.algorithms import options as opt
from rl_core.cards import EstimatorCard, PolicyLossCard
from rl_core.plugins import UnknownCardError

_ADV = "rl_core.algorithms.advantages"
_PG = "rl_core.algorithms.policy_loss"


@hookimpl
def rl_core_register_advantage_estimators(register):
    register(EstimatorCard(
        name="gae", options=opt.GaeOptions, factory=f"{_ADV}:gae", needs_critic=True,
        description="Generalised Advantage Estimation with a critic (PPO; Schulman et al. 2015)",
    ))
    register(EstimatorCard(
        name="grpo", options=opt.GrpoOptions, factory=f"{_ADV}:grpo", needs_groups=True,
        description="group-normalised outcome advantage (DeepSeekMath 2024); norm_adv_by_std=False is Dr. GRPO",
    ))


@hookimpl
def rl_core_register_policy_losses(register):
    register(PolicyLossCard(
        name="ppo_clip", options=opt.LossOptions, factory=f"{_PG}:ppo_clip", skips_zero_advantage=True,
        description="PPO clipped surrogate with separate low/high ranges (PPO 2017; DAPO clip-higher 2025)",
    ))
    register(PolicyLossCard(
        name="dual_clip", options=opt.LossOptions, factory=f"{_PG}:dual_clip", skips_zero_advantage=True,
        description="dual-clip PPO: caps the loss of negative-advantage tokens at -A*clip_ratio_c (Ye et al. 2020)",
    ))
    register(PolicyLossCard(
        name="vanilla", options=opt.LossOptions, factory=f"{_PG}:dual_clip", skips_zero_advantage=True,
        description="verl's default: PPO clip plus the dual clip on negative advantages (clip_ratio_c)",
    ))


def builtin_card(kind: str, name: str) -> EstimatorCard | PolicyLossCard:
    """The built-in ``estimator`` / ``policy_loss`` card named ``name``, without the registry: for code that runs
    without a plan (tests, notebooks). A run uses the plan's loaded cards; a plugin's name is not found here."""
    found: list = []
    (rl_core_register_advantage_estimators if kind == "estimator" else rl_core_register_policy_losses)(found.append)
    cards = {c.name: c for c in found}
    if name not in cards:
        raise UnknownCardError(f"no built-in {kind} named {name!r} (built in: {', '.join(sorted(cards))}); a plugin's {kind} comes "
                          f"from the run's plan, or pass its card: registry.get({kind!r}, {name!r})")
    return cards[name]
