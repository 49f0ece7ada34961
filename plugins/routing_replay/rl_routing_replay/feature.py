"""The object of rl-routing-replay's ``FeatureCard`` (``routing_replay``): what core calls, resolved once into the Plan
and handed to the engines as ``WorkerContext.features["routing_replay"]``. Light: the replay is imported when used."""

from __future__ import annotations

from typing import Any


class RoutingReplayFeature:
    """Core's hf rollout under ``rollout.return_routed_experts`` (R3): ``rollout_recorder(model)`` records each token's
    top-k experts while it decodes (:class:`rl_routing_replay.replay.RolloutRecorder`)."""

    def rollout_recorder(self, model: Any, key: str = "rollout.return_routed_experts") -> Any:
        from rl_routing_replay.replay import RolloutRecorder

        return RolloutRecorder(model, key)


FEATURE = RoutingReplayFeature()


def enabled(config) -> bool:
    """Routing replay is on for R2 / R3 (``actor.router_replay``) or when the rollout returns its routed experts."""
    return config.actor.router_replay != "disabled" or bool(config.rollout.return_routed_experts)
