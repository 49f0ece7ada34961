"""`rlcore check` rules for long-context training (issue #33): Ulysses sequence parallelism and packing.

:func:`sequence_parallel_problems` (a ``files``-stage check this module registers):
with ``actor.ulysses_sequence_parallel_size`` > 1 the model's attention heads must be divisible by it (the
all-to-all gives each rank ``heads / size`` query heads; key / value heads that it does not divide are
repeated, as verl does), the model must be one the packed attention serves, and packing must not be
turned off (Ulysses runs on packed sequences).
"""

from __future__ import annotations

import json
import os
from typing import Any

from rl_core.cards import CheckCard
from rl_core.hookspecs import hookimpl
from rl_core.models import cache_dir
from rl_core.problems import Problem

KEY = "actor.ulysses_sequence_parallel_size"


def _model_config(config: Any) -> dict[str, Any] | None:
    from rl_core.plan.memory import KNOWN_SHAPES

    path = os.path.expanduser(config.model.path or "")
    if path.startswith("builtin:"):  # a model rl-core converts on first use (rl_core.models): its cached folder
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


def sequence_parallel_problems(config: Any, registry: Any = None) -> list[Problem]:
    sp = int(config.actor.ulysses_sequence_parallel_size)
    if sp <= 1:
        return []
    problems = []
    if config.actor.use_remove_padding is False:
        problems.append(Problem(key="actor.use_remove_padding", what=f"is false but {KEY}={sp}: Ulysses runs on packed sequences",
                                fix="remove actor.use_remove_padding (or set it true), or set " + f"{KEY}=1"))
    cfg = _model_config(config)
    if cfg is None:
        return problems  # the model folder's own problems are reported by the model-path probe
    from rl_core.train_engine.packing import PACKABLE_TYPES

    heads = cfg.get("num_attention_heads")
    kv = cfg.get("num_key_value_heads") or heads
    mtype = cfg.get("model_type")
    if mtype not in PACKABLE_TYPES:
        problems.append(Problem(key=KEY, what=f"is {sp} but the model type {mtype!r} is not one the packed attention serves ({', '.join(sorted(PACKABLE_TYPES))})",
                                fix=f"set {KEY}=1"))
    if isinstance(heads, int) and heads % sp:
        ok = [d for d in range(1, heads + 1) if heads % d == 0]
        problems.append(Problem(
            key=KEY,
            what=f"is {sp} but the model has {heads} attention heads ({kv} key / value heads), and {heads} % {sp} = {heads % sp}: "
                 f"the all-to-all gives each rank heads / {sp} query heads",
            fix=f"choose a size that divides {heads} (and the number of devices): one of {ok}",
        ))
    return problems


def positions_problems(config: Any, registry: Any = None) -> list[Problem]:
    """Prompt + response longer than the model's positions: train would fail (or the model read garbage) at the first long
    sample. Refused when the model has no position scaling; a warning when ``rope_scaling`` may stretch it."""
    cfg = _model_config(config)
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
    register(CheckCard(name="sequence_parallel", stage="files", order=40, factory=f"{__name__}:sequence_parallel_problems",
                       description="Ulysses sequence parallelism and packing on the model's attention"))
