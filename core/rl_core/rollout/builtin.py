"""Registers the built-in `hf` rollout backend."""

from __future__ import annotations

from rl_core.cards import RolloutCard
from rl_core.hookspecs import hookimpl

HF_ROLLOUT = RolloutCard(
    name="hf",
    factory="rl_core.rollout.hf:factory",
    description="plain transformers generation with a KV cache (reference backend; CPU or one GPU per replica)",
    devices={"cpu", "cuda"},
    max_tp=1,
    weight_formats={"hf"},
    colocate=True,
    logprobs=True,
    engine="transformers",
    engine_versions=">=4.56",
)


@hookimpl
def rl_core_register_rollout_backends(register):
    register(HF_ROLLOUT)
