"""``data.train_generator`` / ``data.val_generator``: prompt rows made at start-up (rl-data's ``generated_data`` feature).

:data:`GENERATORS` names them: ``reasoning_gym`` makes ``gen.size`` items of a reasoning-gym dataset (:func:`generate`).
:func:`generate_rows` validates the rows as core validates rows read from a file; core's data sets call
:func:`generated_rows` (the feature's object, ``Plan.features``); ``rlcore check`` calls :func:`sample_rows` (the
feature's ``sample_rows`` hook, core's files check): the name, the dataset, the generator's own checks
(:func:`package_problem`: reasoning-gym installed; :func:`kwargs_problem`: ``kwargs`` against the typed options class
the dataset declares), then a two-row sample whose rows the reward checks read.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import types
import typing
from typing import Any, Callable

import attrs
from rl_core.data.rows import DataError, validate_row
from rl_core.problems import Problem, UserError, did_you_mean

from rl_data.convert import generate_reasoning_gym_rows

#: the module reasoning-gym installs and its distribution name
PACKAGE = ("reasoning_gym", "reasoning-gym")


def generate(gen: Any, split: str = "train") -> list[dict[str, Any]]:
    """The rows of a :class:`~rl_core.config.schema.GeneratorConfig` naming ``reasoning_gym``: ``gen.size`` items of the
    reasoning-gym dataset ``gen.dataset`` (a :class:`rl_data.convert.DataConvertError` names a bad dataset or option)."""
    return generate_reasoning_gym_rows(gen.dataset, gen.size, gen.seed, dict(gen.kwargs), gen.system_prompt, split=split)


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def package_problem(gen: Any, key: str) -> list[Problem]:
    module, pip_name = PACKAGE
    if installed(module):
        return []
    return [Problem(key=f"{key}.name", what=f"generator {gen.name!r} needs the package {pip_name}, which is not installed",
                    fix=f"pip install {pip_name} (or pip install 'rl-data[reasoning-gym]')")]


def _type_ok(value: Any, tp: Any) -> bool:
    origin = typing.get_origin(tp)
    if tp is Any or tp is None:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_type_ok(value, a) for a in typing.get_args(tp))
    if origin is typing.Literal:
        return value in typing.get_args(tp)
    if origin in (list, tuple):
        return isinstance(value, (list, tuple))
    if origin is dict:
        return isinstance(value, dict)
    if tp is type(None):
        return value is None
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(tp, type):
        return isinstance(value, tp)
    return True


def kwargs_problem(gen: Any, key: str) -> list[Problem]:
    """reasoning-gym datasets declare their options as a typed dataclass: check names and types against it."""
    if not gen.kwargs or not installed(PACKAGE[0]):
        return []
    try:
        from reasoning_gym.factory import DATASETS

        _, cfg_cls = DATASETS[gen.dataset]
        hints = typing.get_type_hints(cfg_cls)
        names = [f.name for f in dataclasses.fields(cfg_cls)]
    except Exception:  # noqa: BLE001 - unknown dataset (reported by the sample) or an unusual config class
        return []
    for name, value in gen.kwargs.items():
        if name not in names:
            return [Problem(key=f"{key}.kwargs.{name}", what=f"{gen.dataset!r} has no option {name!r}{did_you_mean(str(name), names)}",
                            fix=f"its options: {', '.join(n for n in names if n not in ('seed', 'size'))}")]
        tp = hints.get(name)
        if tp is not None and not _type_ok(value, tp):
            allowed = ", ".join(map(repr, typing.get_args(tp))) if typing.get_origin(tp) is typing.Literal else getattr(tp, "__name__", str(tp))
            return [Problem(key=f"{key}.kwargs.{name}", what=f"{value!r} ({type(value).__name__}) is not a valid {name} for {gen.dataset!r}",
                            fix=f"give {key}.kwargs.{name} a value of type {allowed}")]
    return []


#: generator name -> (``generate(gen, split) -> [row]``, its checks ``check(gen, key) -> [Problem]``)
GENERATORS: dict[str, tuple[Callable[..., list], tuple[Callable[..., list[Problem]], ...]]] = {
    "reasoning_gym": (generate, (package_problem, kwargs_problem)),
}


def _declared() -> dict[str, Any]:
    """The entry points of the group ``rl_data.generators`` (name -> ``module:object``) another package declares."""
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group="rl_data.generators") if ep.name not in GENERATORS}


def generator_names() -> list[str]:
    return [*GENERATORS, *_declared()]


def generator(name: str) -> tuple[Callable[..., list], tuple[Callable[..., list[Problem]], ...]] | None:
    """``(generate, checks)`` of ``name``: :data:`GENERATORS`' or the one another package declares in the entry-point
    group ``rl_data.generators`` (the object ``(generate, checks)`` or ``generate`` alone), loaded only when named; None
    for an unknown name. A declared one that cannot be loaded is a :class:`DataError` naming it."""
    if name in GENERATORS:
        return GENERATORS[name]
    ep = _declared().get(name)
    if ep is None:
        return None
    try:
        obj = ep.load()
    except Exception as exc:  # noqa: BLE001 - a broken package names itself
        raise DataError(f"the data generator {name!r} ({ep.value}, entry point group rl_data.generators) cannot be loaded: {exc}; "
                        "fix or uninstall the package that declares it") from None
    return obj if isinstance(obj, tuple) else (obj, ())


def generated_source(gen: Any) -> str:
    """How rows of a generator are named in messages: ``<generator>/<dataset>``."""
    return f"{gen.name}/{gen.dataset}"


def generate_rows(gen: Any, split: str = "train", generate: Callable[..., list] | None = None) -> list[dict[str, Any]]:
    """Validated rows of a :class:`~rl_data.config.GeneratorConfig`, made by ``generate(gen, split)`` (default: the
    generator ``gen.name`` names: :func:`generator`); its UserError is a :class:`DataError`."""
    key = f"data.{split}_generator"
    generate = generate or (generator(gen.name) or (None,))[0]
    if generate is None:
        raise DataError(f"{key}.name {gen.name!r}: no such generator; set it to one of: {', '.join(generator_names())}")
    if not gen.dataset:
        raise DataError(f"{key}.dataset is empty; name the generator's dataset (e.g. basic_arithmetic for reasoning_gym)")
    try:
        raw = generate(gen, split)
    except UserError as e:
        raise DataError(f"{key}: {e}") from None
    where = generated_source(gen)
    return [validate_row(r, f"{where}, row {i}", "prompt") for i, r in enumerate(raw)]


def enabled(config: Any) -> bool:
    """On when the config names a generator (``data.train_generator.name`` / ``data.val_generator.name``)."""
    return any(getattr(config.data, f"{split}_generator").name for split in ("train", "val"))


def generated_rows(data: Any, split: str) -> tuple[list[dict[str, Any]], list[str], str | None]:
    """The loader's seam: ``(rows, their origins, the source's name)`` of ``data.<split>_generator`` (``([], [], None)``: none)."""
    gen = getattr(data, f"{split}_generator", None)
    if gen is None or not gen.name:
        return [], [], None
    rows = generate_rows(gen, split)
    return rows, [f"{generated_source(gen)}, row {i}" for i in range(len(rows))], generated_source(gen)


def sample_rows(config: Any) -> tuple[list[Problem], list[dict[str, Any]]]:
    """``rlcore check``: each named generator's problems (its name, its dataset, its own checks), then a two-row sample."""
    problems: list[Problem] = []
    rows: list[dict[str, Any]] = []
    for split in ("train", "val"):
        key = f"data.{split}_generator"
        gen = getattr(config.data, f"{split}_generator", None)
        if gen is None or not gen.name:
            continue
        try:
            found = generator(gen.name)
        except DataError as exc:
            problems.append(Problem(key=f"{key}.name", what=str(exc), fix="fix or uninstall the package named above"))
            continue
        if found is None:
            known = generator_names()
            problems.append(Problem(key=f"{key}.name", what=f"no generator named {gen.name!r}{did_you_mean(gen.name, known)}",
                                    fix=f"set {key}.name to one of: {', '.join(known)}, or '' and data.{split}_files"))
            continue
        if not gen.dataset:
            problems.append(Problem(key=f"{key}.dataset", what="is empty", fix="name a reasoning-gym dataset, e.g. basic_arithmetic or gsm_symbolic"))
            continue
        found, got = _sample(key, gen, split, *found)
        problems += found
        rows += got
    return problems, rows


def _sample(key: str, gen: Any, split: str, generate: Callable[..., list], checks: tuple[Callable, ...]) -> tuple[list[Problem], list[dict]]:
    """The generator's own checks (its package, its options), then a two-row sample."""
    problems: list[Problem] = []
    for check in checks:
        try:
            problems += check(gen, key) or []
        except Exception as exc:  # noqa: BLE001 - another package's check must not crash the others
            problems.append(Problem(key=f"{key}.name", what=f"the check {getattr(check, '__name__', check)} of generator {gen.name!r} raised "
                                    f"{type(exc).__name__}: {exc}", fix="report this to the generator's authors"))
    if any(p.severity == "error" for p in problems):
        return problems, []
    try:
        return problems, generate_rows(attrs.evolve(gen, size=min(2, gen.size)), split, generate)
    except DataError as exc:
        return [*problems, Problem(key=f"{key}.dataset", what=str(exc).replace(f"{key}: ", ""), fix=f"fix {key}.dataset / {key}.kwargs")], []
    except Exception as exc:  # noqa: BLE001 - the generator's own error about its options
        return [*problems, Problem(key=f"{key}.kwargs", what=f"generating a sample raised {type(exc).__name__}: {exc}", fix=f"fix {key}.kwargs (options of the {gen.dataset!r} dataset)")], []
