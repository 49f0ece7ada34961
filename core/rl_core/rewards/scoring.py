"""Loading and calling one scorer, shared by the in-process path and the pool workers (which import this module:
standard library only, plus :mod:`rl_core.problems`), and the Plan's check of ``reward.kwargs``."""

from __future__ import annotations

import difflib
import functools
import inspect
import math
import numbers
import os
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

from rl_core.problems import Problem, UserError
from rl_core.util.threads import run_with_timeout
from rl_core.util.user_code import load_user_object
from rl_core.cards import load_object


class RewardConfigError(UserError, ValueError):
    """The reward section of the config cannot be used (missing file, function, reward name...)."""


class Sample(NamedTuple):
    """What a scorer needs to score one response (picklable, small)."""

    index: int
    data_source: Any
    solution_str: str
    ground_truth: Any
    extra_info: Any
    response_length: int | None = None


@dataclass(frozen=True)
class ScorerSpec:
    """Where a scorer comes from (picklable, so workers load it themselves): ``ref`` (a card's ``"module:attr"`` or
    picklable callable) or ``path`` + ``func_name`` (a user's Python file)."""

    label: str
    ref: Any = None
    path: str | None = None
    func_name: str | None = None
    batched: bool = False


def load_custom_function(path: str, func_name: str) -> Callable:
    """Import ``func_name`` from the Python file at ``path`` (verl's ``custom_reward_function``)."""
    return load_user_object(path, func_name, path_key="reward.custom.path", name_key="reward.custom.name",
                            error=RewardConfigError, prefix="_rl_core_custom_reward_")


_LOADED: dict[ScorerSpec, Callable] = {}


def load_scorer(spec: ScorerSpec) -> Callable:
    """The scorer function for ``spec`` (imported once per process)."""
    fn = _LOADED.get(spec)
    if fn is None:
        if spec.path is not None:
            fn = load_custom_function(spec.path, spec.func_name or "compute_score")
        else:
            fn = load_object(spec.ref)
            if not callable(fn):
                raise RewardConfigError(f"reward {spec.label!r}: its factory {spec.ref!r} is not callable")
        _LOADED[spec] = fn
    return fn


@functools.lru_cache(maxsize=256)
def _accepts(fn: Callable, name: str) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.kind is p.VAR_KEYWORD or p.name == name for p in params)


def _accepts_safe(fn: Callable, name: str) -> bool:
    try:
        return _accepts(fn, name)
    except TypeError:  # unhashable callable
        return False


def call_scorer(fn: Callable, sample: Sample, kwargs: dict[str, Any]) -> Any:
    """``fn(data_source=, solution_str=, ground_truth=, extra_info=, **kwargs)``, plus ``response_length`` (tokens)
    for a scorer that accepts it, so verl-style functions with a fixed signature keep working."""
    call = dict(kwargs)
    if sample.response_length is not None and _accepts_safe(fn, "response_length"):
        call.setdefault("response_length", sample.response_length)
    return fn(data_source=sample.data_source, solution_str=sample.solution_str, ground_truth=sample.ground_truth, extra_info=sample.extra_info, **call)


class ScorerTimeout(Exception):
    """A scorer ran past ``reward.timeout_s`` in this process."""


class ScorerExit(Exception):
    """A scorer tried to end the process (``sys.exit``, ``SystemExit``, ``os._exit``, ``KeyboardInterrupt``)."""


class _ExitCalled(BaseException):
    """Raised in place of ``os._exit`` while a scorer runs (a BaseException: the scorer's own ``except Exception`` passes it on)."""


def _refuse_exit(code=0):
    raise _ExitCalled(code)


def call_contained(fn: Callable[[], Any]) -> Any:
    """``fn()`` (a reward function's call), whose attempts to end the run (``sys.exit``, ``os._exit``, replaced during
    the call since it would not unwind, ``KeyboardInterrupt``) become :class:`ScorerExit`. Under Python's default SIGINT
    handler a ``KeyboardInterrupt`` is a real Ctrl-C and passes. ``os.kill`` or a crash in C code are not containable
    in-process: ``reward.num_workers > 0`` runs scorers in processes of their own for those."""
    import signal

    real_exit = os._exit
    os._exit = _refuse_exit
    try:
        return fn()
    except _ExitCalled as exc:
        raise ScorerExit(f"the reward function called os._exit({exc.args[0]!r}); a reward function may not end the run") from None
    except SystemExit as exc:
        raise ScorerExit(f"the reward function raised SystemExit({exc.code!r}) (sys.exit); a reward function may not end the run") from None
    except KeyboardInterrupt:
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            raise
        raise ScorerExit("the reward function raised KeyboardInterrupt; a reward function may not end the run") from None
    finally:
        os._exit = real_exit


def call_with_timeout(fn: Callable[[], Any], timeout_s: float) -> Any:
    """``fn()``, stopped with :class:`ScorerTimeout` after ``timeout_s`` seconds: in the main thread by a ``SIGALRM``
    timer (Python code only: C code such as one giant regex match is not interrupted; ``reward.num_workers > 0`` kills
    such a worker instead), elsewhere by abandoning the daemon thread it runs in."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer"):
        def _expired(signum, frame):
            raise ScorerTimeout(f"the scorer ran longer than reward.timeout_s={timeout_s:g} s")

        previous = signal.signal(signal.SIGALRM, _expired)
        signal.setitimer(signal.ITIMER_REAL, timeout_s)
        try:
            return fn()
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
    return run_with_timeout(fn, timeout_s, lambda: ScorerTimeout(
        f"the scorer ran longer than reward.timeout_s={timeout_s:g} s (left running in a background thread)"), "rl-core-scorer")


def _number(value: Any) -> float | None:
    if type(value) in (float, int, bool):  # the common case, without the ABC check
        return float(value)
    if value is None or isinstance(value, str):
        return None
    if isinstance(value, numbers.Real):  # int, float, bool, Fraction, numpy floats
        return float(value)
    item = getattr(value, "item", None)  # numpy / torch scalars, without importing either
    if callable(item):
        try:
            value = item()
        except Exception:  # noqa: BLE001 - not a one-element value
            return None
        if isinstance(value, numbers.Real):
            return float(value)
    return None


def normalize_result(result: Any) -> tuple[float, dict[str, Any]]:
    """``(score, extras)`` from a scorer's return value (a number or a dict with ``"score"``)."""
    extras: dict[str, Any] = {}
    value = result
    if isinstance(result, dict):
        if "score" not in result:
            raise TypeError(f"the scorer returned a dict without a 'score' key (keys: {sorted(map(str, result))})")
        value = result["score"]
        extras = {k: v for k, v in result.items() if k != "score"}
    score = _number(value)
    if score is None:
        raise TypeError(f"the scorer returned {type(value).__name__} {value!r:.80}, expected a number or a dict with 'score'")
    if not math.isfinite(score):
        raise ValueError(f"the scorer returned a non-finite score {score}")
    return score, extras


def numeric(value: Any) -> float | None:
    """``value`` as a float when it is a real number (bools count), else None."""
    n = _number(value)
    return n if n is not None and math.isfinite(n) else None


_SIMPLE_TYPES = {"int": int, "float": (int, float), "str": str, "bool": bool}


def _annotation(param: inspect.Parameter) -> str:
    ann = param.annotation
    return ann if isinstance(ann, str) else ann.__name__ if isinstance(ann, type) else str(ann)


def _fits(value: Any, param: inspect.Parameter) -> bool | None:
    """Whether ``value`` fits ``param``'s annotation (None: not a simple type like ``float | None``)."""
    names = [t.strip() for t in _annotation(param).split("|")]
    if param.annotation is param.empty or not all(n in _SIMPLE_TYPES or n == "None" for n in names):
        return None
    if value is None:
        return "None" in names or param.default is None
    if isinstance(value, bool) and "bool" not in names:  # a bool is an int to isinstance
        return False
    return any(isinstance(value, _SIMPLE_TYPES[n]) for n in names if n != "None")


def kwargs_problems(fn: Callable, kwargs: dict[str, Any], label: str, skip: tuple[str, ...] = ()) -> list[Problem]:
    """``reward.kwargs`` that ``fn`` has no parameter for (unless it takes ``**kwargs``; ``**_`` declares them ignored,
    so it does not count) and values of the wrong type for a parameter annotated with a simple type (int, float, str,
    bool, optionally ``| None``). ``skip``: the parameters the scorer fills itself."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return []  # builtins and C functions: nothing to check
    named = {n: p for n, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and n not in skip}
    takes_rest = any(p.kind is p.VAR_KEYWORD and not n.startswith("_") for n, p in params.items())
    out = []
    for key, value in kwargs.items():
        param = named.get(key)
        if param is None and not takes_rest:
            close = difflib.get_close_matches(key, list(named), n=1)
            out.append(Problem(key=f"reward.kwargs.{key}", what=f"is not a parameter of {label} (its parameters: {', '.join(named) or 'none'})",
                               fix=f"did you mean reward.kwargs.{close[0]}?" if close else "remove it"))
        elif param is not None and _fits(value, param) is False:
            out.append(Problem(key=f"reward.kwargs.{key}", what=f"is {value!r:.60}, but {label} takes {param.name}: {_annotation(param)}",
                               fix=f"give reward.kwargs.{key} a value of that type"))
    return out
