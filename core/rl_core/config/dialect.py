"""Dialects: another framework's launch (its options, override grammar, config files) read into rl-core's config by
a plugin's :class:`rl_core.cards.DialectCard`.

:func:`rl_core.config.load.load_report` asks each installed dialect ``detect(launch)``; the first that says yes
translates the whole launch (``factory(launch)``, its own defaults included). Otherwise a native launch's keys that are
not rl-core's (:func:`is_ours`) go to the first dialect with ``keys(launch)``, without defaults; with none installed
they are unknown keys (with an install hint, :data:`rl_core.plugins.KNOWN_DISTRIBUTIONS`).
"""

from __future__ import annotations

import re
import typing
from typing import Any, Callable, Mapping

import attrs
import yaml

from rl_core.problems import Problem
from rl_core.util.type_hints import type_hints
from rl_core.config.schema import RunConfig
from rl_core.config.sections import added_to, section_class


@attrs.frozen(kw_only=True)
class Launch:
    """What the user gave: a YAML file's mapping (and a caller's ``base``), the overrides, the dialects' options."""

    path: str | None = None
    data: Mapping[str, Any] = attrs.field(factory=dict)
    overrides: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    # the dialects' command-line options by their argparse dest (``--config-name`` -> config_name); None: not given
    options: Mapping[str, Any] = attrs.field(factory=dict)


@attrs.define(kw_only=True)
class Translated:
    """A dialect's translation: rl-core's raw config tree, which config/load.py then structures and checks."""

    raw: dict[str, Any]  # nested, rl-core's keys
    problems: list[Problem] = attrs.field(factory=list)
    origin: dict[str, str] = attrs.field(factory=dict)  # rl-core key -> the key as the user wrote it
    profile: str = "rl-core"  # whose defaults fill what the launch leaves unset
    defaults: list[tuple[str, Any, Any]] = attrs.field(factory=list)  # (rl-core key, the dialect's default, rl-core's own)
    # ``rlcore check``'s heading above ``defaults``; a later problem about a key from ``defaults`` ends with ``default_note``
    defaults_heading: str = ""
    default_note: str = ""
    unknown_note: str = ""  # added to an unknown translated key's problem (where the dialect's keys are listed)
    after: Callable[[Any], list[Problem]] | None = None  # checks of the structured RunConfig (keys tied to one of ours)


def is_ours(key: str) -> bool:
    """Whether ``key`` is one of rl-core's schema keys (or lies inside one of its free-form dict fields)."""
    cls: Any = RunConfig
    parts = key.split(".")
    for i, part in enumerate(parts):
        fields = {f.name: f for f in attrs.fields(cls) if f.name != "sections"}
        added = added_to(cls)
        if part in added:
            cls = added[part]
            if i == len(parts) - 1:
                return True
            continue
        if part not in fields:
            return False
        tp = type_hints(cls)[part]
        if section_class(tp) is not None:
            cls = section_class(tp)
            continue
        return i == len(parts) - 1 or typing.get_origin(tp) is dict or tp is dict
    return False


def flatten(data: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """``{"a": {"b": 1}}`` -> ``[("a.b", 1)]``; an empty mapping stays a leaf."""
    out: list[tuple[str, Any]] = []
    for k, v in data.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, Mapping) and v:
            out.extend(flatten(v, key))
        else:
            out.append((key, v))
    return out


_PLAIN_KEY = re.compile(r"^[A-Za-z_][\w\-]*(\.([\w\-]+|\*))*$")
_FLOAT = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)$")  # 1e-5: a float (YAML 1.1 reads it as a string)


def grammar_of(text: str) -> bool:
    """Whether an override uses a grammar rl-core does not read itself (``+key``, ``~key``, ``group@package``)."""
    key = text.partition("=")[0].strip()
    return key.startswith(("+", "~")) or "@" in key


def parse_override(text: str) -> tuple[str, Any, Problem | None]:
    """``(key, value, problem)`` of one rl-core override: a dotted key, ``=``, a YAML value (scalar or ``[a, b]`` list)."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not _PLAIN_KEY.match(key):
        return key or text, None, Problem(key=key or text, what=f"{text!r} is not a key=value override",
                                          fix="write overrides as dotted.key=value, e.g. rollout.n=8; quote values with spaces, e.g. 'key=[a,b]'")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        return key, None, Problem(key=key, what=f"{text!r}: the value is not valid YAML ({getattr(exc, 'problem', exc)})",
                                  fix="quote the value, e.g. key='a: b', or write a list as key=[a,b]")
    if isinstance(value, str) and _FLOAT.match(value.strip()):
        value = float(value)
    return key, value, None
