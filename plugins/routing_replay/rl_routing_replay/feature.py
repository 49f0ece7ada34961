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


def plan_lines(stack: Any) -> list[str]:
    """The ``plan_lines`` hook: what `rlcore train --dry-run` says of the replay (``describe_plan``)."""
    from rl_core.trainer.loop import needs_old_log_prob_pass  # the loop's decision; imported when a plan is described

    rr = stack.config.actor.router_replay
    if rr == "disabled":  # the rollout's routing returned without R3: rl_routing_replay.checks refuses it
        return []
    return ["MoE routing replay: " + (
        "R3: the rollout's routing of each token, replayed in the old-log-prob pass and the update" if rr == "R3" else
        "R2: the old-log-prob pass's routing, replayed in the update" if needs_old_log_prob_pass(stack) else
        "R2 without an old-log-prob pass (on-policy): the update's own forward is the recorded one, routed natively")]
