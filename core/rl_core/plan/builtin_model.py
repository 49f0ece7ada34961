"""Built-in offline models (``model.path: builtin:<name>``): a package's ``BuiltinModelCard`` (rl-model-smollm2's
``smollm2``), resolved into ``Plan.builtin_model``, makes the folder once into :func:`cache_dir` (``models/<name>``)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Callable

import attrs

from rl_core.util.console import phase

BUILTIN = "builtin:"
MARKER = "rlcore_model.json"  # written last by the card's factory: says what the folder holds


def cache_dir() -> Path:
    """Where built-in models are kept: ``$RL_CORE_CACHE``, else ``$XDG_CACHE_HOME/rl-core``, else ``~/.cache/rl-core``."""
    if os.environ.get("RL_CORE_CACHE"):
        return Path(os.environ["RL_CORE_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "rl-core"


def is_complete_model_dir(path: str | os.PathLike, name: str | None = None) -> bool:
    """True if ``path`` holds a built-in model (``name``, or any) its factory finished writing (config.json, the marker)."""
    try:
        with open(os.path.join(path, MARKER)) as f:
            made = json.load(f).get("name")
    except (OSError, ValueError, AttributeError):
        return False
    return made is not None and name in (None, made) and os.path.isfile(os.path.join(path, "config.json"))


def ensure_builtin_model(make: Callable[..., Any], name: str, out_dir: str | os.PathLike | None = None) -> Path:
    """A local HF folder for built-in model ``name``: ``make(out_dir, log=)`` (its card's factory) on first use."""
    out = Path(out_dir or cache_dir() / "models" / name)
    if is_complete_model_dir(out, name):
        return out.resolve()
    return Path(make(out, log=lambda m: print(f"builtin:{name}: {m}", file=sys.stderr, flush=True)))


def with_builtin_model(plan: Any) -> Any:
    """The plan with ``model.path: builtin:NAME`` replaced by its folder, made on first use (the plan knows its
    architecture already: nothing is resolved again; the workers never import the card's package)."""
    config = plan.config
    if plan.builtin_model is None or not config.model.path.startswith(BUILTIN):
        return plan
    with phase(f"preparing {config.model.path} (converted on first use, then cached)"):
        local = ensure_builtin_model(plan.builtin_model, config.model.path[len(BUILTIN):])
    return attrs.evolve(plan, config=attrs.evolve(config, model=attrs.evolve(config.model, path=str(local))), builtin_model=None)
