"""Objects named by ``"package.module:attr"`` references: what cards and options hold instead of imports."""

from __future__ import annotations

import importlib
from typing import Any, Callable


def load_object(ref: str | Callable) -> Any:
    """Import ``"package.module:attr.sub"`` and return the object; a callable is returned unchanged (cards may hold
    either, a path being preferred: nothing is imported until needed)."""
    if not isinstance(ref, str):
        return ref
    module_name, sep, attr_path = ref.partition(":")
    if not sep or not module_name or not attr_path:
        raise ValueError(f"factory reference {ref!r} must look like 'package.module:attribute'")
    obj: Any = importlib.import_module(module_name)
    for part in attr_path.split("."):
        obj = getattr(obj, part)
    return obj
