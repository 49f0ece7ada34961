"""rl-routing-replay's check of the run plan: ``actor.router_replay`` and ``rollout.return_routed_experts`` agree
(:func:`config_problems`, once core's cross-key rule), and the chosen backends can do what they ask (the cards'
``routed_experts`` / ``router_replay`` capabilities)."""

from __future__ import annotations

from typing import Any

from rl_core.problems import Problem


def _installed(registry: Any, kind: str, fits) -> str:
    names = sorted(c.name for c in registry.cards[kind].values() if fits(c))
    return f" (installed: {', '.join(names)})" if names else " (none installed)"


def _card(registry: Any, kind: str, name: str | None) -> Any:
    """The card ``name`` of ``kind`` (None: unknown, the resolver names that); without a name the installed default."""
    cards = registry.cards[kind]
    if name is None:
        defaults = [c for c in cards.values() if getattr(c, "default", False)] or (list(cards.values()) if len(cards) == 1 else [])
        return defaults[0] if len(defaults) == 1 else None
    return cards.get(name)


def config_problems(config: Any) -> list[Problem]:
    """The two keys together: R3 needs the rollout's routing, which nothing but R3 reads; multi-turn rollouts record none."""
    mode, ret = config.actor.router_replay, config.rollout.return_routed_experts
    if mode == "R3" and not ret:
        return [Problem(key="actor.router_replay", what="is R3 (replay the rollout's routing) but rollout.return_routed_experts=false: the rollout records none",
                        fix="set rollout.return_routed_experts=true, or actor.router_replay=R2 (replay the old-log-prob pass's routing)")]
    if ret and mode != "R3":
        return [Problem(key="rollout.return_routed_experts", what=f"is true with actor.router_replay={mode}: only R3 replays the rollout's routing, nothing else reads it",
                        fix="set actor.router_replay=R3, or rollout.return_routed_experts=false" + (" (R2 records its own in the old-log-prob pass)" if mode == "R2" else ""))]
    if ret and getattr(getattr(config.rollout, "multi_turn", None), "enable", False):  # rl-agent's section
        return [Problem(key="rollout.return_routed_experts", what="is true with rollout.multi_turn.enable=true: no rollout engine of rl-core records the routing of "
                        "multi-turn trajectories (tool responses are not routed by the engine)", fix="use actor.router_replay=R2, or single-turn rollouts")]
    return []


def routing_problems(config: Any, registry: Any) -> list[Problem]:
    """The registered check: the keys together first (their problem is the one shown per key), then the backends."""
    return config_problems(config) + backend_problems(config, registry)


def backend_problems(config: Any, registry: Any) -> list[Problem]:
    """MoE routing replay: the rollout card must return routed experts for R3, the train card replay them."""
    out = []
    rollout = _card(registry, "rollout", config.rollout.name)
    if rollout is not None and config.rollout.return_routed_experts and not rollout.routed_experts:
        out.append(Problem(
            key="rollout.return_routed_experts",
            what=f"rollout backend {rollout.name!r} does not return the experts each token was routed to (MoE routing replay R3)",
            fix=f"use actor.router_replay=R2, or a rollout backend that returns them{_installed(registry, 'rollout', lambda c: c.routed_experts)}",
        ))
    train = _card(registry, "train", config.train.name)
    if train is not None and config.actor.router_replay != "disabled" and not train.router_replay:
        out.append(Problem(
            key="actor.router_replay",
            what=f"is {config.actor.router_replay} but train backend {train.name!r} does not replay MoE routing",
            fix=f"set actor.router_replay=disabled, or use a train backend that replays it{_installed(registry, 'train', lambda c: c.router_replay)}",
        ))
    return out
