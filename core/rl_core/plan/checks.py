"""The plan, built once: every problem of a config in one ordered pipeline (`rlcore check`, `rlcore train`).

:func:`build_plan` runs, once each: what loading found (``keys``, ``values``, ``rules``; a bad value's default stands
in afterwards so the later stages still run), the resolver (names, engines, sizes), then every registered
:class:`~rl_core.cards.CheckCard` in stage order (:data:`STAGES`). Problems are sorted by stage and only the first
error per key is kept (later ones are usually its consequences); a check that raises becomes a problem naming it.
"""

from __future__ import annotations

import typing
from typing import Any, Callable, Iterable

import attrs

from rl_core.cards import CHECK_STAGES
from rl_core.plan.resolver import NAME_KEYS, first_per_key, resolve
from rl_core.plugins import Registry, get_registry
from rl_core.problems import Problem, errors
from rl_core.util.type_hints import type_hints
from rl_core.config.schema import RunConfig
from rl_core.config.sections import Sectioned, added_to

STAGES = CHECK_STAGES
Check = Callable[[Any, Any], Iterable[Problem]]


@attrs.frozen
class Report:
    """What :func:`build_plan` found: the plan (when nothing is an error) and every problem, ordered."""

    plan: Any
    problems: list[Problem]
    config: Any

    @property
    def errors(self) -> list[Problem]:
        return errors(self.problems)


def registered_checks(registry: Registry) -> list[tuple[str, str, Check]]:
    """``(stage, name, check)`` of every registered check card, in running order; a check that does not load is a
    check that reports so."""
    cards = sorted(registry.cards["check"].values(), key=lambda c: (STAGES.index(c.stage), c.order, c.name))
    out = []
    for card in cards:
        try:
            fn = card.load()
        except Exception as exc:  # noqa: BLE001 - a plugin's broken path is reported by name, the others run
            fn = _broken(card, exc)
        out.append((card.stage, f"{card.name} ({card.provider or 'unregistered'})", fn))
    return out


def _broken(card: Any, exc: Exception) -> Check:
    def check(config: Any, registry: Any) -> list[Problem]:
        return [Problem(key=f"check.{card.name}", what=f"the check {card.name!r} from {card.provider} has a factory {card.factory!r} that does not load: "
                        f"{type(exc).__name__}: {exc}", fix=f"report this to the authors of {card.provider}; the other checks ran")]

    return check


def _schema_knows(key: str) -> bool:
    """Whether a dotted key names a field of the schema (anything under a free-form dict counts)."""
    cls: Any = RunConfig
    for part in key.split("."):
        part = part.split("[")[0]
        if not attrs.has(cls):
            return True  # inside a dict / free-form field
        fields = {f.name: f for f in attrs.fields(cls)}
        added = added_to(cls)
        if part in added:
            cls = added[part]
            continue
        if part not in fields:
            return False
        tp = type_hints(cls)[part]
        nested = [a for a in (typing.get_args(tp) or (tp,)) if attrs.has(a)]
        cls = nested[0] if nested else None
    return True


def with_defaults(config: Any, keys: Iterable[str]) -> Any:
    """``config`` with each dotted key's value put back to the schema's default (keys that name no field are skipped),
    so the checks after a value that broke its rule still run on the rest of the config."""
    for key in keys:
        parts = key.split("[")[0].split(".")
        try:
            config = _reset(config, parts)
        except (KeyError, AttributeError, TypeError, ValueError, attrs.exceptions.NotAnAttrsClassError):
            continue
    return config


def _reset(obj: Any, parts: list[str]) -> Any:
    if isinstance(obj, Sectioned) and parts[0] in obj.sections:  # a package's section
        section = obj.sections[parts[0]]
        value = type(section)() if len(parts) == 1 else _reset(section, parts[1:])
        return attrs.evolve(obj, sections={**obj.sections, parts[0]: value})
    field = {f.name: f for f in attrs.fields(type(obj))}[parts[0]]
    if len(parts) == 1:
        default = field.default
        value = default.factory() if isinstance(default, attrs.Factory) else default
        return attrs.evolve(obj, **{field.name: value})
    return attrs.evolve(obj, **{field.name: _reset(getattr(obj, field.name), parts[1:])})


def _stage_of_resolved(p: Problem) -> str:
    if p.key in NAME_KEYS:
        return "names"
    if p.key.startswith("model.path"):
        return "files"
    return "rules"


def _run_check(stage: str, name: str, fn: Check, config: Any, registry: Any) -> list[tuple[str, Problem]]:
    try:
        return [(stage, p) for p in (fn(config, registry) or [])]
    except Exception as exc:  # noqa: BLE001 - one broken check must not hide the others' findings
        return [(stage, Problem(key=f"check.{name.split()[0]}", what=f"the check {name} raised {type(exc).__name__}: {exc}", fix="report this (rlcore check); the other checks ran"))]


def order(found: list[tuple[str, Problem]]) -> list[Problem]:
    """By stage (stable), each problem once, the first error per key; warnings all kept."""
    ranked = [p for _, (_, p) in sorted(enumerate(found), key=lambda item: (STAGES.index(item[1][0]), item[0]))]
    return first_per_key(list(dict.fromkeys(ranked)))


def build_plan(loaded: Any, registry: Registry, *, devices: bool = True, extra: Callable[[Any], Iterable[Problem]] | None = None,
               rewrite: Callable[[list[Problem]], list[Problem]] | None = None) -> Report:
    """Resolve and check a loaded config, once: the frozen plan, or every problem in fixing order. ``devices=False``
    skips the ``device`` checks; ``extra(config)``: more ``device`` problems (`--target`); ``rewrite``: applied to the
    problems found after loading, which then name the keys as the user wrote them (``loaded.as_written``)."""
    config = loaded.config
    if config is None:
        return Report(plan=None, problems=order([("keys", p) for p in loaded.problems]), config=None)
    rule_keys = getattr(loaded, "rule_keys", frozenset())
    found: list[tuple[str, Problem]] = [
        ("keys" if not _schema_knows(p.key) else "rules" if p.key in rule_keys else "values", p) for p in loaded.problems
    ]
    # the later stages see the schema's defaults in place of the values found bad so far
    config = with_defaults(config, [p.key for _, p in found if p.severity == "error"])
    later: list[tuple[str, Problem]] = []
    plan, resolved = resolve(config, registry, rules=False)  # the value and cross-key rules ran once, at load
    later += [(_stage_of_resolved(p), p) for p in resolved]
    for stage, name, fn in registered_checks(registry):
        if stage == "device" and not devices:
            continue
        later += _run_check(stage, name, fn, config, registry)
    if extra is not None:
        later += [("device", p) for p in extra(config)]
    shown = [p for _, p in later]
    shown = rewrite(shown) if rewrite is not None else shown
    shown = loaded.as_written(shown)
    # rewrite / as_written keep the order and the count: stages follow by position
    found += [(stage, p) for (stage, _), p in zip(later, shown)]
    problems = order(found)
    if errors(problems):
        plan = None
    elif plan is not None:
        plan = attrs.evolve(plan, warnings=tuple(problems))
    return Report(plan=plan, problems=problems, config=config)


@attrs.frozen
class _Given:
    """A config built in code, standing in for a loaded one: nothing found while loading, keys as given."""

    config: Any
    problems: tuple = ()
    rule_keys: frozenset = frozenset()

    def as_written(self, problems: Iterable[Problem]) -> list[Problem]:
        return list(problems)


def plan_for(config: Any, registry: Registry | None = None, *, devices: bool = True) -> tuple[Any, list[Problem]]:
    """A config built in code (tests, benches, notebooks): resolved and checked by every registered check, once; the
    plan (None when anything is an error) and the problems. Without ``registry``: the installed plugins'."""
    report = build_plan(_Given(config), registry if registry is not None else get_registry(), devices=devices)
    return report.plan, report.problems
