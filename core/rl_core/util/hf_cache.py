"""The KV-cache argument of a transformers model's ``forward`` under its old name (``past_key_values``) and its new one
(``cache``, transformers 5.24+): the name the installed model takes (a feature check, not a version parse), and the
cache read back under either.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

NAMES = ("cache", "past_key_values")  # the current name first


def cache_keyword(model: torch.nn.Module) -> str | None:
    """The keyword ``model.forward`` takes the KV cache under, or None if it takes none."""
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return None
    return next((name for name in NAMES if name in params), None)


def output_cache(out: Any) -> Any:
    """The KV cache a forward returned (``out.cache`` or, before the rename, ``out.past_key_values``)."""
    for name in NAMES:
        value = out.get(name) if hasattr(out, "get") else getattr(out, name, None)
        if value is not None:
            return value
    raise AttributeError(f"the model's output ({type(out).__name__}) holds no KV cache under {' or '.join(NAMES)}")
