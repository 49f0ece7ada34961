"""rl-hf-decode's cards: the feature object core's hf rollout asks for its decoder, and the check of its keys' values.
Light: no torch."""

from __future__ import annotations

from rl_core import hookimpl
from rl_core.cards import CheckCard, FeatureCard

from rl_hf_decode.keys import KEYS


@hookimpl
def rl_core_register_features(register) -> None:
    register(FeatureCard(name="hf_decode", factory="rl_hf_decode.feature:enabled", provides="rl_hf_decode.feature:FEATURE",
                         keys=tuple(f"rollout.engine_kwargs.{k}" for k in KEYS),
                         description="the hf rollout's GPU decode loop: a static KV cache, a CUDA graph per step, packed projections"))


@hookimpl
def rl_core_register_checks(register) -> None:
    register(CheckCard(name="hf_decode_values", stage="values", order=65, factory="rl_hf_decode.checks:value_problems",
                       description="the hf rollout's rollout.engine_kwargs of rl-hf-decode: their values"))
