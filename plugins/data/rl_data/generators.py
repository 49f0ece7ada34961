"""The ``reasoning_gym`` generator card: ``data.train_generator`` / ``data.val_generator`` rows made at start-up.

``generate(gen, split)`` is the card's factory (core validates the rows as it does rows read from a file,
:func:`rl_core.data.dataset.generate_rows`); :func:`package_problem` and :func:`kwargs_problem` are its checks, run
by `rlcore check` before a two-row sample is generated: reasoning-gym installed, and ``kwargs`` against the typed
options class the dataset declares (a misspelt option or a value of the wrong type named with its key).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import types
import typing
from typing import Any

from rl_core.problems import Problem, did_you_mean

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
