"""Config sections a package contributes: a feature's schema lives with the feature.

A :class:`rl_core.cards.ConfigSectionCard`'s name is the section's key (``ray``, or dotted under a core section:
``rollout.multi_turn``), its factory the attrs class. :func:`rl_core.config.load.structure` reads it as core's own
sections, into the parent's ``sections``; code reads it as an attribute and sets it with :func:`evolve_key`.
"""

from __future__ import annotations

import typing
from typing import Any, ClassVar, Mapping

import attrs

from rl_core.plugins import get_registry
from rl_core.util.user_paths import evolve_key  # noqa: F401 - public here: set a key of any section

#: sections whose key is a Python keyword: the attribute carries a trailing underscore (``config.async_``)
KEYWORD_SECTIONS = {"async": "async_"}
_ATTRIBUTE_KEYS = {attr: key for key, attr in KEYWORD_SECTIONS.items()}


def _defaults(self: Any) -> dict[str, Any]:
    return {key: cls() for key, cls in children(installed(), type(self).SECTION_KEY).items()}


@attrs.frozen(kw_only=True)
class Sectioned:
    """A config section that packages may add sections to: ``sections`` holds them by key, read as attributes
    (every installed one: its defaults unless the config writes it). ``SECTION_KEY``: this section's own key."""

    SECTION_KEY: ClassVar[str] = ""
    sections: Mapping[str, Any] = attrs.field(default=attrs.Factory(_defaults, takes_self=True), repr=False)

    def __getattr__(self, name: str) -> Any:  # only reached when no field has the name
        try:
            extra = object.__getattribute__(self, "sections")
        except AttributeError:  # before __init__ ran (copy / pickle)
            raise AttributeError(name) from None
        key = _ATTRIBUTE_KEYS.get(name, name)
        if key in extra:
            return extra[key]
        raise AttributeError(f"{type(self).__name__} has no field or installed section {name!r}")


def installed() -> dict[str, type]:
    """``{dotted key: attrs class}`` of every installed section (the classes imported here: schema modules are light)."""
    registry = get_registry()
    if _CACHE[0] is not registry:
        _CACHE[:] = [registry, {name: card.load() for name, card in sorted(registry.cards.get("config_section", {}).items())}]
    return _CACHE[1]


_CACHE: list[Any] = [None, {}]  # [the registry, its sections]


def children(schemas: Mapping[str, type], prefix: str) -> dict[str, type]:
    """The registered sections directly under ``prefix`` ("" for the top level), by their last key."""
    out = {}
    for dotted, cls in schemas.items():
        parent, _, key = dotted.rpartition(".")
        if parent == prefix:
            out[key] = cls
    return out


def added_to(cls: type) -> dict[str, type]:
    """The installed sections directly under the config class ``cls`` (none unless it is :class:`Sectioned`)."""
    return children(installed(), cls.SECTION_KEY) if isinstance(cls, type) and issubclass(cls, Sectioned) else {}


def section_class(tp: Any) -> type | None:
    """The attrs class a field's type names (``X`` or ``X | None``); None for a leaf key."""
    return next((a for a in (typing.get_args(tp) or (tp,)) if attrs.has(a)), None)


def flatten_sections(data: Any) -> Any:
    """``attrs.asdict`` output with each ``sections`` dict folded into its parent, as the user writes the config."""
    if not isinstance(data, dict):
        return data
    out = {k: flatten_sections(v) for k, v in data.items() if k != "sections"}
    for key, value in (data.get("sections") or {}).items():
        out[key] = flatten_sections(value)
    return out
