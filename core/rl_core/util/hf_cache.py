"""The KV-cache argument of a transformers model's ``forward``, under its old and its new name.

transformers renamed ``forward(past_key_values=...)`` and the output's ``past_key_values`` to ``cache``
(5.24 has the new names and warns that the old keyword goes away in 5.40; 4.56-5.23 have only the old
ones). A check on the name alone (``"past_key_values" in signature``) silently turned rl-core's
shared-prompt forward off under 5.24. These helpers find the name the installed model takes (a feature
check, not a version parse) and read the cache back under either name.
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
