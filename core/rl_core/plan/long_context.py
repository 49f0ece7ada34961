"""`rlcore check`'s ``positions`` rule: prompt + response within the model's positions; :func:`model_config`, the
model's config.json as a check reads it (rl-train-fsdp's Ulysses check too)."""

from __future__ import annotations

import json
import os
from typing import Any

from rl_core.cards import CheckCard
from rl_core.hookspecs import hookimpl
from rl_core.plan.builtin_model import cache_dir
from rl_core.problems import Problem
from rl_core.plan.memory import KNOWN_SHAPES


def model_config(config: Any) -> dict[str, Any] | None:
    """The model's config.json (a built-in model's cached folder; a known hub shape) with model.override_config applied."""
    path = os.path.expanduser(config.model.path or "")
    if path.startswith("builtin:"):  # a model rl-core converts on first use (rl_core.plan.builtin_model): its cached folder
        path = str(cache_dir() / "models" / path.split(":", 1)[1])
    cand = os.path.join(path, "config.json")
    try:
        with open(cand) as f:
            cfg = json.load(f)
    except (OSError, ValueError):
        cfg = KNOWN_SHAPES.get(path.lower())
    if not isinstance(cfg, dict):
        return None
    cfg = cfg.get("text_config", cfg) if "num_attention_heads" not in cfg else cfg
    return {**cfg, **(config.model.override_config or {})}


def positions_problems(config: Any, registry: Any = None) -> list[Problem]:
    """Prompt + response longer than the model's positions: train would fail (or the model read garbage) at the first long
    sample. Refused when the model has no position scaling; a warning when ``rope_scaling`` may stretch it."""
    cfg = model_config(config)
    positions = (cfg or {}).get("max_position_embeddings")
    if not isinstance(positions, int) or positions <= 0:
        return []
    prompt, response = int(config.data.max_prompt_length or 0), int(config.data.max_response_length or 0)
    if prompt + response <= positions:
        return []
    scaled = bool(cfg.get("rope_scaling"))
    return [Problem(
        key="data.max_response_length",
        what=f"data.max_prompt_length ({prompt}) + data.max_response_length ({response}) = {prompt + response} tokens, but the model "
             f"{config.model.path!r} has {positions} positions (max_position_embeddings)"
             + (" and a rope_scaling entry that may or may not cover it" if scaled else ""),
        fix=f"keep prompt + response within {positions} tokens (e.g. data.max_response_length={max(positions - prompt, 1)}), "
            "or use a model with a longer context",
        severity="warning" if scaled else "error",
    )]


@hookimpl
def rl_core_register_checks(register) -> None:
    register(CheckCard(name="positions", stage="files", order=41, factory=f"{__name__}:positions_problems",
                       description="prompt + response within the model's positions"))
