"""The object of rl-multimodal's ``FeatureCard`` (``multimodal``): what core calls for prompts with images, resolved
once into the Plan (``Plan.features["multimodal"]``) and handed to the engines (``WorkerContext.features``). Light: the
torch / transformers modules are imported when a method runs."""

from __future__ import annotations

from typing import Any, Sequence


class MultimodalFeature:
    """Core's trainer (the data's processor, what of the run cannot carry images) and hf rollout (the prefill's
    keyword arguments and positions, the tokens never sampled)."""

    def processor_for_model(self, model_cfg: Any) -> Any:
        """The model's image encoder (:class:`rl_multimodal.images.ImageEncoder`), None for a text-only model."""
        from rl_multimodal.images import processor_for_model

        return processor_for_model(model_cfg)

    def stack_problems(self, plan: Any, datasets: list) -> list:
        """Problems of a resolved plan with the run's data sets (prompts with images it cannot carry)."""
        from rl_multimodal.checks import stack_problems

        return stack_problems(plan, datasets)

    def for_rollout(self, config: Any) -> "MultimodalFeature":
        """The hf rollout's side of a batch whose prompts carry images; multi-turn rollouts do not carry them yet (refused
        here at run time, by rl_multimodal.checks before it)."""
        if getattr(getattr(config.rollout, "multi_turn", None), "enable", False):  # rl-agent's section
            raise ValueError("the prompts carry images, which multi-turn rollouts do not carry yet: set rollout.multi_turn.enable=false "
                             "or use text-only data")
        return self

    def to_device(self, mm: Sequence[dict], device: Any) -> list[dict]:
        from rl_multimodal.forward import to_device

        return to_device(mm, device)

    def prefill(self, model: Any, ids: Any, mask: Any, images: Sequence[dict]) -> tuple[dict[str, Any], Any]:
        """``(keyword arguments of the prompt's forward, [b, 1] each prompt's largest position)``: the hf rollout
        decodes prompts with images with models that have multimodal RoPE only."""
        from rl_multimodal.forward import model_kwargs, next_positions

        kw = model_kwargs(model, ids, mask, images)
        if "position_ids" not in kw:
            raise ValueError(f"the prompts carry images, and the hf rollout decodes images only with models that have multimodal RoPE "
                             f"(get_rope_index: Qwen2-VL, Qwen2.5-VL, Qwen3-VL, ...), not {type(model).__name__}")
        return kw, (next_positions(kw["position_ids"]) - 1).unsqueeze(1)

    def vision_token_ids(self, model: Any) -> list[int]:
        """The model's image / video pad tokens: never sampled for prompts with images."""
        from rl_multimodal.forward import vision_token_ids

        return vision_token_ids(model)


FEATURE = MultimodalFeature()


def enabled(config) -> bool:
    """No config key switches it on: rows with images do (core asks ``Plan.features.get("multimodal")`` for them)."""
    return False
