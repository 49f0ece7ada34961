"""Every problem of a config in one run, in the order a user would fix them (`rlcore check`, `rlcore train`).

Stages (:data:`STAGES`), each run even when an earlier one found problems:

1. ``keys``: unknown or misspelt keys (did-you-mean from the schema);
2. ``values``: a value of the wrong type or outside its rule (the key's default stands in afterwards);
3. ``rules``: rules that tie keys together (sampling, generators, the batch-size arithmetic, what an
   estimator needs);
4. ``names``: names resolved against the installed plugins (backends, estimator, policy loss, reward:
   did-you-mean from what is installed) and the engines they need;
5. ``files``: the model, the data, the reward function, logger packages, the output folder;
6. ``device``: GPUs, CPU cores, precision.

A *probe* is a pure function ``probe(config, registry) -> Iterable[Problem]`` registered for a stage
with :func:`add_probe` (modules listed in :data:`PROBE_MODULES` are imported first, so theirs register).
A probe that raises becomes a problem naming it; it never stops the others. Problems are sorted by
stage (stable within one), and only the first error per key is kept: later ones about the same key are
usually its consequences.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Iterable

import attrs

from rl_core.problems import ConfigError, Problem, errors
from rl_core.type_hints import type_hints

STAGES = ("keys", "values", "rules", "names", "files", "device")
Probe = Callable[[Any, Any], Iterable[Problem]]

#: modules whose import registers probes (add yours here)
PROBE_MODULES: list[str] = ["rl_core.model_path", "rl_core.check_probes"]
#: probes of modules that do not register themselves: (stage, "module:function")
PROBE_FUNCTIONS: list[tuple[str, str]] = [("values", "rl_core.lora_checks:lora_and_offload_problems"), ("files", "rl_core.long_context:sequence_parallel_problems")]
_PROBES: list[tuple[str, Probe]] = []

#: keys whose value is a name looked up among the installed plugins
NAME_KEYS = frozenset({"rollout.name", "train.name", "algorithm.adv_estimator", "actor.policy_loss", "reward.name", "reward.custom.path", "reward.custom.name"})


def add_probe(stage: str, probe: Probe) -> Probe:
    """Register ``probe`` for ``stage`` (one of :data:`STAGES`); returns it (usable as a decorator factory's body)."""
    if stage not in STAGES:
        raise ValueError(f"unknown check stage {stage!r}; one of {', '.join(STAGES)}")
    if all(p is not probe for _, p in _PROBES):
        _PROBES.append((stage, probe))
    return probe


def probe(stage: str) -> Callable[[Probe], Probe]:
    """Decorator: ``@probe("files")`` registers the function for that stage."""
    return lambda fn: add_probe(stage, fn)


def data_rows(config: Any) -> list[dict]:
    """The first rows of the config's train / val data, as the ``files`` checks read them (for probes that check rows)."""
    from rl_core.preflight import data_problems

    return data_problems(config)[1]


def plugin_probe_problems(config: Any, registry: Any) -> list[Problem]:
    """The problems of the probes that plugins registered (modules outside rl_core), for callers without :func:`collect`."""
    return [p for stage, fn in list(_PROBES) if not getattr(fn, "__module__", "").startswith("rl_core.") for _, p in _run_probe(stage, fn, config, registry)]


def registered_probes() -> list[tuple[str, Probe]]:
    for name in PROBE_MODULES:
        importlib.import_module(name)
    for stage, target in PROBE_FUNCTIONS:
        module, _, attr = target.partition(":")
        add_probe(stage, getattr(importlib.import_module(module), attr))
    return list(_PROBES)


@attrs.frozen
class Report:
    """What :func:`collect` found: the stack (when nothing is an error) and every problem, ordered."""

    stack: Any
    problems: list[Problem]
    config: Any

    @property
    def errors(self) -> list[Problem]:
        return errors(self.problems)


def _schema_knows(key: str) -> bool:
    """Whether a dotted key names a field of the schema (anything under a free-form dict counts)."""
    import typing

    from rl_core.config.schema import RunConfig

    cls: Any = RunConfig
    for part in key.split("."):
        part = part.split("[")[0]
        if not attrs.has(cls):
            return True  # inside a dict / free-form field
        fields = {f.name: f for f in attrs.fields(cls)}
        if part not in fields:
            return False
        tp = type_hints(cls)[part]
        nested = [a for a in (typing.get_args(tp) or (tp,)) if attrs.has(a)]
        cls = nested[0] if nested else None
    return True


def with_defaults(config: Any, keys: Iterable[str]) -> Any:
    """``config`` with each dotted key's value put back to the schema's default (keys that name no field are skipped).

    A value that broke its rule is replaced, so the checks after it (sizes, names, files) still run on the
    rest of the config instead of stopping at the first bad value.
    """
    for key in keys:
        parts = key.split("[")[0].split(".")
        try:
            config = _reset(config, parts)
        except (KeyError, AttributeError, TypeError, ValueError, attrs.exceptions.NotAnAttrsClassError):
            continue
    return config


def _reset(obj: Any, parts: list[str]) -> Any:
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


def _run_probe(stage: str, fn: Probe, config: Any, registry: Any) -> list[tuple[str, Problem]]:
    try:
        return [(stage, p) for p in (fn(config, registry) or [])]
    except Exception as exc:  # noqa: BLE001 - one broken probe must not hide the others' findings
        name = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__name__', fn)}"
        return [(stage, Problem(key="check", what=f"the check {name} raised {type(exc).__name__}: {exc}", fix="report this (rlcore check); the other checks ran"))]


def order(found: list[tuple[str, Problem]]) -> list[Problem]:
    """By stage (stable), the first error per key; warnings all kept."""
    ranked = sorted(enumerate(found), key=lambda item: (STAGES.index(item[1][0]), item[0]))
    seen: set[str] = set()
    out: list[Problem] = []
    for _, (_, p) in ranked:
        if p.severity == "error":
            if p.key in seen:
                continue
            seen.add(p.key)
        if p not in out:
            out.append(p)
    return out


def collect(loaded: Any, registry: Any = None, *, devices: bool = True, extra: Callable[[Any], Iterable[Problem]] | None = None,
            rewrite: Callable[[list[Problem]], list[Problem]] | None = None) -> Report:
    """Resolve and probe a loaded config (:func:`rl_core.config.load.load_report`); every problem, in fixing order.

    ``extra(config)``: more problems for the ``device`` stage (`rlcore check --target`); ``rewrite``: applied to
    the problems found after loading (`--skip-device-check` turns missing engines into warnings). Problems
    after loading name the keys as the user wrote them (``loaded.as_written``).
    """
    from rl_core.config.rules import CROSS_RULES
    from rl_core.plugins import get_registry
    from rl_core.preflight import world_checks
    from rl_core.resolver import resolve

    registry = registry or get_registry()
    config = loaded.config
    if config is None:
        return Report(stack=None, problems=order([("keys", p) for p in loaded.problems]), config=None)
    cross = set()
    for rule in CROSS_RULES:
        out = rule(config)
        cross |= {p.key for p in (out if isinstance(out, list) else [out] if out is not None else [])}
    found: list[tuple[str, Problem]] = [
        ("keys" if not _schema_knows(p.key) else "rules" if p.key in cross else "values", p) for p in loaded.problems
    ]
    # the later stages see the schema's defaults in place of the values found bad so far
    config = with_defaults(config, [p.key for _, p in found if p.severity == "error"])
    later: list[tuple[str, Problem]] = []
    stack, resolved = resolve(config, registry)
    later += [(_stage_of_resolved(p), p) for p in resolved]
    for stage, problems in world_checks(config, registry, devices=devices):
        later += [(stage, p) for p in problems]
    for stage, fn in registered_probes():
        if stage == "device" and not devices:
            continue
        later += _run_probe(stage, fn, config, registry)
    if extra is not None:
        later += [("device", p) for p in extra(config)]
    shown = [p for _, p in later]
    shown = rewrite(shown) if rewrite is not None else shown
    shown = loaded.as_written(shown)
    # rewrite / as_written keep the order and the count: stages follow by position
    found += [(stage, p) for (stage, _), p in zip(later, shown)]
    problems = order(found)
    if errors(problems):
        stack = None
    elif stack is not None:
        stack = attrs.evolve(stack, warnings=tuple(problems))
    return Report(stack=stack, problems=problems, config=config)


def raise_if_errors(report: Report) -> None:
    if report.errors:
        raise ConfigError(report.errors)
