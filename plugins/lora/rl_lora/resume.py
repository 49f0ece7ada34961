"""A resume that would drop trained adapters (rl-lora's ``resume_drops`` feature hook): core's output-folder check
(``rl_core.trainer.outputs.check_previous_run``) asks for ``--resume-anyway`` twice before it drops them. Light."""

from __future__ import annotations

from typing import Any, Mapping


def dropped(old: Mapping[str, Any], new: Mapping[str, Any]) -> str | None:
    """What a resume under ``new`` drops of the trained LoRA adapters of ``old`` (both plain config trees), in words;
    None when every trained adapter stays."""
    detail = dropped_adapters(old, new)
    return None if detail is None else f"trained LoRA adapters: {detail}"


def dropped_adapters(old: Mapping[str, Any], new: Mapping[str, Any]) -> str | None:
    """What a resume under ``new`` drops of the LoRA adapters ``old`` trained (LoRA turned off, target modules narrowed,
    modules excluded), in words; None when every trained adapter stays."""
    was, now = (old.get("model") or {}), (new.get("model") or {})
    if not int(was.get("lora_rank") or 0):
        return None
    if not int(now.get("lora_rank") or 0):
        return "model.lora_rank is now 0: every adapter"

    def names(value: Any) -> set[str]:
        return {value} if isinstance(value, str) else set(value or ())

    before, after = names(was.get("target_modules")), names(now.get("target_modules"))
    gone = sorted(before - after) if "all-linear" not in after else []
    excluded = sorted(names(now.get("exclude_modules")) - names(was.get("exclude_modules")))
    parts = ([f"model.target_modules no longer names {', '.join(gone)}"] if gone else []) + (
        [f"model.exclude_modules now leaves out {', '.join(excluded)}"] if excluded else [])
    return "; ".join(parts) or None
