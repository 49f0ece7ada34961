"""rl-lora's registrations: the ``lora`` feature (rl_core.plan.features) and its check. Light: no torch, no peft."""

from __future__ import annotations

from typing import Any

from rl_core import hookimpl
from rl_core.cards import CheckCard, FeatureCard


def enabled(config: Any) -> bool:
    """LoRA is on: ``model.lora_rank > 0``."""
    return config.model.lora_rank > 0


@hookimpl
def rl_core_register_features(register) -> None:
    register(FeatureCard(name="lora", factory=f"{__name__}:enabled", keys=("model.lora_rank",),
                         memory="rl_lora.memory:memory_terms", alternatives="rl_lora.memory:alternatives",
                         hooks={"rollout_adapters": "rl_lora.merge:InPlaceLora", "weight_sync": "rl_lora.sync:adapter_sync",
                                "resume_drops": "rl_lora.resume:dropped"},
                         description="LoRA adapters on a frozen base (model.lora_*): memory terms, the hf rollout's in-place merge, adapter sync"))


@hookimpl
def rl_core_register_checks(register) -> None:
    register(CheckCard(name="lora", stage="values", order=40, factory="rl_lora.checks:lora_problems",
                       description="model.lora_*: the adapter folder, target modules and rank against the model; what the engines apply"))
