"""Models that rl-core can make without a network (``model.path: builtin:<name>``), converted once into
:func:`cache_dir`."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from rl_core.models.smollm2 import ModelConversionError, convert_smollm2, is_complete_model_dir

BUILTIN_MODELS = ("smollm2",)
#: each built-in model's architecture (its config.json's ``architectures[0]``), known before it is converted
BUILTIN_ARCHITECTURES = {"smollm2": "LlamaForCausalLM"}


def cache_dir() -> Path:
    """Where built-in models are kept: ``$RL_CORE_CACHE``, else ``$XDG_CACHE_HOME/rl-core``, else ``~/.cache/rl-core``."""
    if os.environ.get("RL_CORE_CACHE"):
        return Path(os.environ["RL_CORE_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "rl-core"


def ensure_builtin_model(name: str, out_dir: str | os.PathLike | None = None) -> Path:
    """A local HF folder for built-in model ``name``, converting it on first use (progress on stderr)."""
    if name not in BUILTIN_MODELS:
        raise ModelConversionError(f"unknown built-in model {name!r}; allowed: {list(BUILTIN_MODELS)} (e.g. model.path=builtin:smollm2)")
    out = Path(out_dir or cache_dir() / "models" / name)
    if is_complete_model_dir(out):
        return out.resolve()
    return convert_smollm2(out, log=lambda m: print(f"builtin:{name}: {m}", file=sys.stderr, flush=True))
