"""``typing.get_type_hints`` of a config class, computed once per class.

The config modules use ``from __future__ import annotations``, so every call of
``typing.get_type_hints`` compiles and evaluates each field's annotation string again: loading and checking
one config asked for them ~200 times (about a third of an `rlcore check`). The classes do not change after
import, so their hints are read once and handed out read-only.
"""

from __future__ import annotations

import functools
import types
import typing
from typing import Any, Mapping


@functools.cache
def type_hints(cls: type) -> Mapping[str, Any]:
    """``typing.get_type_hints(cls)``, cached per class (a read-only mapping)."""
    return types.MappingProxyType(typing.get_type_hints(cls))
