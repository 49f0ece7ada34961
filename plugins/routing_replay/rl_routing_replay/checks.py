"""rl-routing-replay's check of the run plan: the chosen backends can do what ``actor.router_replay`` /
``rollout.return_routed_experts`` ask (the cards' ``routed_experts`` / ``router_replay`` capabilities)."""

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
