"""How a schema field's type is named in messages and docs ("int or null", "list[float]")."""

from __future__ import annotations

import types
import typing
from typing import Any


def type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(type_name(a) for a in typing.get_args(tp))
    if origin is not None:
        args = ", ".join(type_name(a) for a in typing.get_args(tp))
        return f"{origin.__name__}[{args}]"
    if tp is type(None):
        return "null"
    if tp is Any:
        return "any"
    return getattr(tp, "__name__", str(tp))


def article(type_name: str) -> str:
    words = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string"}
    return words.get(type_name, f"a value of type {type_name}")
