"""Step observers (:class:`~rl_core.cards.ObserverCard`): the controller hands them each step's and validation's rollouts.

The plan loads every installed observer card once (:func:`observer_plan`, checking ``trainer.observers.<name>``); the
trainer builds them once (:class:`Observers`) and calls, in order, ``on_start(step)``, ``on_rollouts(rollouts)`` per
training step and validation batch, ``on_step_end(step)`` before the checkpoint is written, and ``close()``; docs/plugins.md
says when each runs. Every method is optional; an observer that raises is dropped with a warning, training goes on."""

from __future__ import annotations

import logging
from typing import Any, Callable, Protocol

import attrs

from rl_core.card_options import options_problems
from rl_core.problems import Problem, UserError, did_you_mean

logger = logging.getLogger(__name__)

#: the observer methods the trainer calls, in the order of a run
METHODS = ("on_start", "on_rollouts", "on_step_end", "close")


@attrs.frozen(kw_only=True)
class StepRollouts:
    """One step's rollouts as the controller holds them; read them, never change them (the same batch trains the policy).

    ``batch``: the rows (docs/plugins.md lists their fields); ``scores``: the reward per row, ``raw_scores`` before
    reward shaping; ``reward_extras``: the reward function's per-row dicts (None when unknown); ``trainer_log_probs``: the
    old policy's log-probs (NaN rows where none, None when the step computed none); ``policy_version``: the weights'
    version that generated the rows when the batch does not say."""

    step: int
    phase: str = attrs.field(validator=attrs.validators.in_(("train", "val")))
    batch: Any  # rl_core.batch.Batch (not imported: this module stays light for the plan, which loads observer cards)
    scores: Any
    raw_scores: Any = None
    reward_extras: list | None = None
    trainer_log_probs: Any = None
    policy_version: int = 0
    tokenizer: Any = None
    max_response_length: int = 0


class StepObserver(Protocol):
    """What an observer card's factory returns (every method optional)."""

    def on_start(self, step: int) -> None: ...

    def on_rollouts(self, rollouts: StepRollouts) -> None: ...

    def on_step_end(self, step: int) -> None: ...

    def close(self) -> None: ...


def observer_plan(config: Any, registry: Any) -> tuple[tuple[tuple[Any, Callable], ...], list[Problem]]:
    """``((card, factory), ...)`` of every installed observer card, and the problems of ``trainer.observers``."""
    given = dict(config.trainer.observers or {})
    cards = registry.cards["observer"]
    problems: list[Problem] = []
    for name, value in given.items():
        if name not in cards:
            problems.append(Problem(
                key=f"trainer.observers.{name}", what=f"is no installed observer{did_you_mean(name, cards)}",
                fix=f"installed observers: {', '.join(sorted(cards)) or 'none'} (rl-traces provides 'traces': pip install rl-traces)",
            ))
        elif value is not None and not isinstance(value, dict):
            problems.append(Problem(key=f"trainer.observers.{name}", what=f"must be a mapping of options, got {value!r}",
                                    fix=f"write trainer.observers.{name}.<option>=value"))
    out = []
    for name, card in sorted(cards.items()):
        key = f"trainer.observers.{name}"
        if isinstance(given.get(name), dict):
            problems.extend(options_problems(card, given[name], key))
        try:
            out.append((card, card.load()))
        except Exception as exc:  # noqa: BLE001 - a plugin's broken factory path is reported, not raised
            dist = card.provider.distribution if card.provider else "its plugin"
            problems.append(Problem(key=key, what=f"the observer {name!r} (from {dist}) does not load: {type(exc).__name__}: {exc}",
                                    fix=f"reinstall {dist}, or skip it with RL_CORE_BLOCK_PLUGINS={dist}"))
    return tuple(out), problems


class Observers:
    """The run's observers, built once; :meth:`call` hands each its method's arguments."""

    def __init__(self, planned: tuple[tuple[Any, Callable], ...], config: Any, output_dir: str) -> None:
        self.active: list[tuple[Any, Any]] = []
        for card, make in planned:
            options = dict((config.trainer.observers or {}).get(card.name) or {})
            try:
                observer = make(config, options, output_dir)
            except UserError:
                raise
            except Exception as exc:
                raise UserError(f"the observer {card.name!r} ({_who(card)}) failed to start: {type(exc).__name__}: {exc}; "
                                f"fix trainer.observers.{card.name}, or skip it with RL_CORE_BLOCK_PLUGINS={_who(card)}") from exc
            if observer is not None:
                self.active.append((card, observer))

    def __bool__(self) -> bool:
        return bool(self.active)

    def call(self, method: str, *args: Any) -> None:
        for card, observer in list(self.active):
            fn = getattr(observer, method, None)
            if fn is None:
                continue
            try:
                fn(*args)
            except Exception as exc:  # noqa: BLE001 - a diagnostic never stops the run
                logger.warning("the observer %r (%s) raised in %s and is off for the rest of the run (training goes on): %s: %s",
                               card.name, _who(card), method, type(exc).__name__, exc)
                self.active.remove((card, observer))
                if method != "close" and (close := getattr(observer, "close", None)) is not None:
                    try:
                        close()
                    except Exception:  # noqa: BLE001
                        pass


def _who(card: Any) -> str:
    return str(card.provider.distribution) if card.provider else "local"
