"""rl-offload's check: ``*.fsdp_config.*_offload`` needs a train backend whose card declares ``offload``."""

from __future__ import annotations

from typing import Any

from rl_core.problems import Problem

SWITCHES = ("param_offload", "optimizer_offload", "offload_policy")


def offload_problems(config: Any, registry: Any = None) -> list[Problem]:
    """``*.fsdp_config.*_offload`` with a train backend whose card does not declare ``offload``: refused."""
    keys = [f"{role}.fsdp_config.{k}" for role in ("actor", "critic") for k in SWITCHES
            if getattr(getattr(getattr(config, role), "fsdp_config", None), k, False)]
    if not keys or registry is None:
        return []
    cards = registry.cards["train"]
    if config.train.name is not None:
        card = cards.get(config.train.name)
    else:
        chosen = [c for c in cards.values() if c.default] or (list(cards.values()) if len(cards) == 1 else [])
        card = chosen[0] if len(chosen) == 1 else None  # as rl_core.plan.resolver.default_train_name picks it
    if card is None or card.offload:
        return []
    names = sorted(c.name for c in cards.values() if c.offload)
    capable = "train.name=" + " or ".join(names) if names else "a train backend that declares it (none installed)"
    return [Problem(key=k, what=f"is true, but the {card.name} train backend does not offload to host memory",
                    why="the run would keep everything on the device and ignore the setting", fix=f"use {capable}, or set {k}=false")
            for k in keys]
