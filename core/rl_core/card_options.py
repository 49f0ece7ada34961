"""Typed card options: what an estimator, policy loss, train backend or observer accepts (``algorithm.options``, ...),
declared once as an attrs class deriving from :class:`Options` and checked by ``rlcore check`` (docs/plugins.md).

The card's function still gets the config's options as a mapping, so declaring them changes nothing at run time.
A card with ``options=None`` gets its options unchecked, with a warning."""

from __future__ import annotations

import types
import typing
from typing import Any, Literal, Mapping, Union

import attrs

from rl_core.problems import Problem, did_you_mean
from rl_core.util.type_hints import type_hints
from rl_core.util.objects import load_object


@attrs.frozen(kw_only=True)
class Options:
    """Base of a card's options class (attrs, frozen, keyword-only); no options of its own."""


def options_class(card: Any) -> type | None:
    """The card's options class (``card.options``: a class, a ``"module:Class"`` path, or None)."""
    ref = getattr(card, "options", None)
    if ref is None:
        return None

    cls = load_object(ref)
    if not (isinstance(cls, type) and attrs.has(cls)):
        raise TypeError(f"its options {ref!r} are not an attrs class (derive from rl_core.card_options.Options)")
    return cls


def type_name(tp: Any) -> str:
    if typing.get_origin(tp) is Literal:
        return " | ".join(repr(a) for a in typing.get_args(tp))
    if typing.get_origin(tp) in (Union, types.UnionType):
        return " | ".join(type_name(a) for a in typing.get_args(tp))
    return "None" if tp is type(None) else getattr(tp, "__name__", str(tp))


def fits(value: Any, tp: Any) -> bool:
    """Whether a YAML / command-line ``value`` is a ``tp`` (an int is a float; ``Literal``, unions; else ``isinstance``)."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return True
    if origin in (Union, types.UnionType):
        return any(fits(value, a) for a in typing.get_args(tp))
    if origin is Literal:
        return value in typing.get_args(tp)
    if tp is type(None):
        return value is None
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, origin or tp)


def describe(cls: type) -> str:
    """``name: type = default, ...`` of an options class (for fixes and docs)."""
    hints = type_hints(cls)
    parts = []
    for f in attrs.fields(cls):
        default = "" if f.default is attrs.NOTHING else f" = {f.default!r}"
        parts.append(f"{f.name}: {type_name(hints.get(f.name, Any))}{default}")
    return ", ".join(parts) or "none"


def options_problems(card: Any, given: Mapping[str, Any] | None, key: str) -> list[Problem]:
    """Problems with the options ``given`` under config ``key`` for ``card`` (its declared options class)."""
    given = dict(given or {})
    who = f"the {card.kind.replace('_', ' ')} {card.name!r}" + (f" (from {card.provider.distribution})" if getattr(card, "provider", None) else "")
    try:
        cls = options_class(card)
    except Exception as exc:  # noqa: BLE001 - a plugin's bad declaration is reported, not raised
        dist = card.provider.distribution if getattr(card, "provider", None) else "the plugin"
        return [Problem(key=key, what=f"{who} declares options that do not load: {type(exc).__name__}: {exc}", fix=f"report it to the authors of {dist}")]
    if cls is None:
        if not given:
            return []
        return [
            Problem(
                key=key, severity="warning", what=f"not checked: {who} declares no options class",
                why="its card does not say which options it reads, so a misspelt key would change nothing",
                fix=f"make sure each key is one {card.name!r} reads (its documentation)",
            )
        ]
    hints = type_hints(cls)
    fields = {f.name: f for f in attrs.fields(cls)}
    problems = []
    for name, value in given.items():
        if name not in fields:
            problems.append(
                Problem(
                    key=f"{key}.{name}", what=f"is not an option of {who}{did_you_mean(name, fields)}",
                    why=f"{key} is handed to {card.name!r} as is; a key it does not read would change nothing",
                    fix=f"fix the name, or remove {key}.{name} (its options: {describe(cls)})",
                )
            )
        elif not fits(value, tp := hints.get(name, Any)):
            problems.append(
                Problem(
                    key=f"{key}.{name}", what=f"{who} expects {type_name(tp)}, got {value!r} ({type(value).__name__})",
                    fix=f"set {key}.{name} to a {type_name(tp)}" + (f" (default {fields[name].default!r})" if fields[name].default is not attrs.NOTHING else ""),
                )
            )
    missing = [n for n, f in fields.items() if f.default is attrs.NOTHING and n not in given]
    for name in missing:
        problems.append(Problem(key=f"{key}.{name}", what=f"is required by {who}", fix=f"set {key}.{name} ({type_name(hints.get(name, Any))})"))
    if not problems:
        try:
            cls(**given)  # the class's own validators (ranges, relations between options)
        except (TypeError, ValueError) as exc:
            problems.append(Problem(key=key, what=f"{who} refuses these options: {exc}", fix=f"fix the value under {key} (its options: {describe(cls)})"))
    return problems
