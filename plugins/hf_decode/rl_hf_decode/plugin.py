"""rl-hf-decode's card: the feature object core's hf rollout asks for its decoder. Light: no torch."""

from __future__ import annotations

from rl_core import hookimpl
from rl_core.cards import FeatureCard


@hookimpl
def rl_core_register_features(register) -> None:
    register(FeatureCard(name="hf_decode", factory="rl_hf_decode.feature:enabled", provides="rl_hf_decode.feature:FEATURE",
                         keys=("rollout.engine_kwargs.static_decode",),
                         description="the hf rollout's GPU decode loop: a static KV cache, a CUDA graph per step, packed projections"))
