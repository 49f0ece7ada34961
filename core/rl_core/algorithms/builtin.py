"""The ``builtin_algorithms`` entry point: registers gae, grpo, ppo_clip and dual_clip / vanilla through the public
hooks, as any package would (no torch import: factories are dotted paths). The others are rl-algorithms'."""

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
    """The built-in ``estimator`` / ``policy_loss`` card ``name``, without the registry: for code without a plan."""
    found: list = []
    (rl_core_register_advantage_estimators if kind == "estimator" else rl_core_register_policy_losses)(found.append)
    cards = {c.name: c for c in found}
    if name not in cards:
        raise UnknownCardError(f"no built-in {kind} named {name!r} (built in: {', '.join(sorted(cards))}); a plugin's {kind} comes "
                          f"from the run's plan, or pass its card: registry.get({kind!r}, {name!r})")
    return cards[name]
