"""rl-routing-replay's cards: the feature object core's hf rollout calls, and the check of the chosen backends."""

from __future__ import annotations

from rl_core import hookimpl
from rl_core.cards import CheckCard, FeatureCard


@hookimpl
def rl_core_register_features(register):
    register(FeatureCard(name="routing_replay", factory="rl_routing_replay.feature:enabled", provides="rl_routing_replay.feature:FEATURE",
                         keys=("actor.router_replay", "rollout.return_routed_experts"), hooks={"plan_lines": "rl_routing_replay.feature:plan_lines"},
                         description="MoE routing replay (actor.router_replay R2 / R3): records / forces an HF model's top-k routers"))


@hookimpl
def rl_core_register_checks(register):
    register(CheckCard(name="routing_replay", stage="rules", order=50, factory="rl_routing_replay.checks:routing_problems",
                       description="actor.router_replay and rollout.return_routed_experts agree; the rollout returns routed experts for R3, the train backend replays them"))
