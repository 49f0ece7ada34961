"""rl-offload's registrations: the ``offload`` feature (rl_core.plan.features) and its check. Light: no torch."""

from __future__ import annotations

from rl_core import hookimpl
from rl_core.cards import CheckCard, FeatureCard

KEYS = tuple(f"{role}.fsdp_config.{k}" for role in ("actor", "critic") for k in ("param_offload", "optimizer_offload", "offload_policy"))


@hookimpl
def rl_core_register_features(register) -> None:
    register(FeatureCard(name="offload", factory="rl_offload.memory:enabled", keys=KEYS,
                         memory="rl_offload.memory:memory_terms", alternatives="rl_offload.memory:alternatives",
                         hooks={"host_terms": "rl_offload.memory:host_terms"},
                         description="CPU offload between phases (actor.fsdp_config.*_offload): memory terms of the device and host estimates"))


@hookimpl
def rl_core_register_checks(register) -> None:
    register(CheckCard(name="offload", stage="values", order=40, factory="rl_offload.checks:offload_problems",
                       description="actor.fsdp_config.*_offload: what the train backend applies"))
