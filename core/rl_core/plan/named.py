"""Names the plan resolves beyond the backends: ``trainer.loggers`` (tracker cards) and ``model.path: builtin:NAME``
(a built-in model's card), each looked up and its factory loaded once (``Plan.trackers`` / ``Plan.builtin_model``). An unknown
name is a problem naming the key and, for a first-party package's name, its install (``KNOWN_DISTRIBUTIONS``).
"""

from __future__ import annotations

from typing import Any, Callable

from rl_core.config.schema import LOGGERS
from rl_core.plan.builtin_model import BUILTIN
from rl_core.plugins import Registry, UnknownCardError, known_distribution
from rl_core.problems import Problem

Named = tuple[tuple[str, Any, str], ...]  # (name, card, the key that named it)


def _card(registry: Registry, kind: str, name: str, key: str, fix: str, problems: list[Problem]) -> Any:
    try:
        return registry.get(kind, name)
    except UnknownCardError as exc:
        known = known_distribution(kind, name)
        problems.append(Problem(key=key, what=str(exc), fix=f"pip install {known[1]}; or {fix}" if known else fix))
        return None


def tracker_cards(config: Any, registry: Registry, problems: list[Problem]) -> Named:
    """The tracker card of every name in ``trainer.loggers`` that is not core's own (``console``, ``jsonl``)."""
    out = []
    loggers = list(config.trainer.loggers or [])
    for i, name in enumerate(loggers):
        if name in LOGGERS or name in [n for n, _, _ in out]:
            continue
        known = ", ".join([*LOGGERS, *registry.names("tracker")])
        card = _card(registry, "tracker", name, f"trainer.loggers[{i}]", f"remove {name!r} from trainer.loggers, or name one of: {known}", problems)
        if card is not None:
            out.append((name, card, f"trainer.loggers[{i}]"))
    return tuple(out)


def builtin_card(config: Any, registry: Registry, problems: list[Problem]) -> Any:
    """The card of ``model.path: builtin:NAME`` (None for any other path, or a problem naming the install)."""
    path = config.model.path or ""
    if not path.startswith(BUILTIN):
        return None
    known = ", ".join(BUILTIN + n for n in registry.names("builtin_model")) or "(none installed)"
    return _card(registry, "builtin_model", path[len(BUILTIN):], "model.path", f"set model.path to a model folder or one of: {known}", problems)


def loaded(named: Named, load: Callable[[Any, str, list[Problem]], Any], problems: list[Problem]) -> tuple[tuple[str, Callable], ...]:
    """``((name, the card's loaded factory), ...)``; a factory that does not load is a problem naming the key."""
    out = []
    for name, card, key in named:
        fn = load(card, key, problems)
        if fn is not None:
            out.append((name, fn))
    return tuple(out)
