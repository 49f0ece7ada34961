"""Log-prob roles (:class:`~rl_core.cards.LogProbRoleCard`): the second models whose per-token log-probs an estimator
reads (``EstimatorCard.log_probs``; ``"actor"`` is the sampling policy's own), each card's factory loaded once.
"""

from __future__ import annotations

from typing import Any

from rl_core.plugins import Registry, UnknownCardError
from rl_core.problems import Problem

#: the policy's own log-probs of its samples (rollout log-probs or the old log-prob pass): not a role card
ACTOR = "actor"


def resolve_log_prob_roles(registry: Registry, estimator: Any, problems: list[Problem]) -> tuple[tuple[str, Any, Any], ...]:
    """``((name, card, loaded factory), ...)`` for the roles ``estimator`` reads; a problem per missing role."""
    out = []
    for name in getattr(estimator, "log_probs", ()) if estimator is not None else ():
        if name == ACTOR:
            continue
        who = f"advantage estimator {estimator.name!r} ({estimator.provider.distribution if estimator.provider else 'unregistered'})"
        try:
            card = registry.get("log_prob_role", name)
        except UnknownCardError as exc:
            problems.append(Problem(key="algorithm.adv_estimator", what=f"{who} reads the log-probs of the role {name!r}: {exc}",
                                    fix=f"install the plugin that registers the log-prob role {name!r}, or pick another algorithm.adv_estimator"))
            continue
        try:
            fn = card.load()
        except Exception as exc:  # noqa: BLE001 - a plugin's import failure, reported by name
            problems.append(Problem(key="algorithm.adv_estimator", what=f"log-prob role {name!r} from {card.provider or 'an unregistered card'} "
                                    f"has a factory {card.factory!r} that does not load: {type(exc).__name__}: {exc}",
                                    fix="fix the card's factory path, or pick another algorithm.adv_estimator"))
            continue
        out.append((name, card, fn))
    return tuple(out)
