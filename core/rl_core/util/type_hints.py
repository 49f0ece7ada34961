"""``typing.get_type_hints`` of a config class, computed once per class (each call evaluates every annotation string
again, and a config check asks hundreds of times); the classes never change after import."""

from __future__ import annotations

import functools
import types
import typing
from typing import Any, Mapping


@functools.cache
def type_hints(cls: type) -> Mapping[str, Any]:
    """``typing.get_type_hints(cls)``, cached per class (a read-only mapping)."""
    return types.MappingProxyType(typing.get_type_hints(cls))
