"""The step's hooks a config turns on (reward shapers, the batch sampler), resolved once into the Plan: a card names
the boolean key that turns it on (``enabled_by``); a true key no installed card claims names its package.
"""

from __future__ import annotations

from typing import Any, Callable

from rl_core.plugins import KNOWN_DISTRIBUTIONS, Registry
from rl_core.problems import Problem
from rl_core.util.user_paths import get_key

Hook = tuple[Any, Callable]  # (card, its loaded factory)


def _enabled(config: Any, registry: Registry, kind: str, problems: list[Problem]) -> list[Hook]:
    out = []
    for card in sorted(registry.cards[kind].values(), key=lambda c: c.name):
        if get_key(config, card.enabled_by) is not True:
            continue
        try:
            out.append((card, card.load()))
        except Exception as exc:  # noqa: BLE001 - a plugin's broken path is a problem naming it
            problems.append(Problem(key=card.enabled_by, what=f"turns on the {kind} {card.name!r} from {card.provider}, whose factory "
                                    f"{card.factory!r} does not load: {type(exc).__name__}: {exc}",
                                    fix=f"reinstall {card.provider.distribution if card.provider else 'its package'}, or set {card.enabled_by}=false"))
    return out


def step_hooks(config: Any, registry: Registry) -> tuple[tuple[Hook, ...], Hook | None, list[Problem]]:
    """``(reward shapers, batch sampler or None, problems)`` of ``config``."""
    problems: list[Problem] = []
    shapers = _enabled(config, registry, "reward_shaping", problems)
    samplers = _enabled(config, registry, "batch_sampler", problems)
    claimed = {card.enabled_by for kind in ("reward_shaping", "batch_sampler") for card in registry.cards[kind].values()}
    for key, dist in KNOWN_DISTRIBUTIONS["step_hook"].items():
        if key not in claimed and get_key(config, key) is True:
            problems.append(Problem(key=key, what=f"is true, but no installed package provides this feature (the distribution {dist} does)",
                                    fix=f"pip install {dist}, or set {key}=false"))
    if len(samplers) > 1:
        keys = " and ".join(card.enabled_by for card, _ in samplers)
        problems.append(Problem(key=samplers[1][0].enabled_by, what=f"turns on a second batch sampler: {keys} each gather the step's batch their own way",
                                fix="turn on one of them"))
    return tuple(shapers), (samplers[0] if samplers else None), problems
