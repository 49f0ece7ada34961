"""Checking ``rollout.engine_kwargs`` against what an engine accepts (vLLM's ``LLM``, ``sglang.Engine``) in ``rlcore
check``, rather than as the engine's ``TypeError`` on a GPU node minutes in; rollout plugins' checks call it.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from rl_core.problems import Problem, did_you_mean

PREFIX = "rollout.engine_kwargs"


def engine_kwargs_problems(
    given: Mapping[str, Any],
    accepted: Iterable[str] | None,
    *,
    engine: str,
    own: Iterable[str] = (),
    from_config: Mapping[str, str] | None = None,
) -> list[Problem]:
    """One problem per key of ``given`` the engine would not take as meant: one rl-core sets from its config
    (``from_config``: engine argument -> rl-core key), or one neither in ``own`` (the plugin's keys) nor in ``accepted``
    (the engine's argument names; None: unknown, nothing refused on that ground)."""
    from_config = dict(from_config or {})
    own = set(own)
    known = None if accepted is None else set(accepted) | own
    problems: list[Problem] = []
    for name in given:
        if name in from_config:
            problems.append(Problem(key=f"{PREFIX}.{name}", what=f"is set by rl-core from {from_config[name]}",
                                    why=f"rl-core passes {name} to {engine} from its own config; two values would disagree",
                                    fix=f"set {from_config[name]} instead and remove {PREFIX}.{name}"))
        elif known is not None and name not in known:
            problems.append(Problem(key=f"{PREFIX}.{name}", what=f"is not an argument of the installed {engine}{did_you_mean(name, known)}",
                                    why=f"{PREFIX} is passed to {engine} as is; it would fail at start-up with a TypeError",
                                    fix=f"fix or remove {PREFIX}.{name} (the installed {engine}'s arguments are its engine arguments)"))
    return problems


def bucket_size_problems(given: Mapping[str, Any], key: str = "weight_sync_bucket_mb") -> list[Problem]:
    """The weight-sync bucket size (MiB) of a rollout plugin, when set, is a positive number."""
    mb = given.get(key)
    if mb is None or (not isinstance(mb, bool) and isinstance(mb, (int, float)) and mb > 0):
        return []
    return [Problem(key=f"{PREFIX}.{key}", what=f"must be a positive number of MiB, got {mb!r}",
                    fix=f"e.g. {PREFIX}.{key}=256 (smaller: less peak memory, more calls)")]
