"""docs/config.md's table of every key: type, default and allowed values, from the schema's fields and rules.

``python -m tests.config.keytable`` prints it (a docs tool: the run never reads it).
"""

from __future__ import annotations

import typing
from typing import Any

import attrs

from rl_core.config.load import type_name
from rl_core.config.rules import RULE, Length, NonEmpty, OneOf, Range
from rl_core.config.schema import RunConfig
from rl_core.config.sections import added_to, section_class


def describe(rule: Any) -> str:
    """What a rule allows, in words (docs/config.md's table)."""
    if rule is None:
        return ""
    if isinstance(rule, Range):
        return rule.allowed() + (f" ({rule.hint})" if rule.hint else "")
    if isinstance(rule, OneOf):
        return "one of: " + ", ".join(f"`{v}`" if v != "" else "`''`" for v in rule.values())
    if isinstance(rule, Length):
        return f"{rule.n} values, each {describe(rule.item)}"
    if isinstance(rule, NonEmpty):
        return "not empty" + (f" ({rule.hint})" if rule.hint else "")
    return str(rule)


def key_rows(cls: type, prefix: str = "") -> list[tuple[str, str, str, str]]:
    """``(key, type, default, allowed)`` for every leaf key of an attrs config class."""
    rows = []
    hints = typing.get_type_hints(cls)
    for f in attrs.fields(cls):
        if f.name == "sections":  # installed packages' sections under this one: after its own keys
            continue
        key = f"{prefix}.{f.name}" if prefix else f.name
        tp = hints[f.name]
        if section_class(tp) is not None:
            rows += key_rows(section_class(tp), key)
            continue
        default = f.default.factory() if isinstance(f.default, attrs.Factory) else f.default
        shown = repr(default) if isinstance(default, str) else "null" if default is None else str(default).lower() if isinstance(default, bool) else str(default)
        rows.append((key, type_name(tp), shown, describe(f.metadata.get(RULE))))
    for name, section in added_to(cls).items():
        rows += key_rows(section, f"{prefix}.{name}" if prefix else name)
    return rows


def key_table() -> str:
    """The markdown table of every key."""
    esc = lambda s: s.replace("|", "\\|")  # noqa: E731
    lines = ["| key | type | default | allowed |", "|---|---|---|---|"]
    lines += [f"| `{k}` | {esc(t)} | `{esc(d)}` | {esc(a)} |" for k, t, d, a in key_rows(RunConfig)]
    return "\n".join(lines)


if __name__ == "__main__":
    print(key_table())
