"""The resolver accepts what the extras install: each plugin card's engine range admits the tested versions.

An extra that installs vLLM 0.26 next to a card that says ``>=0.32`` would make
``rlcore check`` refuse the engine ``pip install rl-rollout-vllm[gpu]`` just gave.
The cards come from ``rlcore plugins --json``: from ``RL_CORE_PLUGINS_JSON`` when
.ci/wheels.sh wrote it in its venv of installed wheels (every plugin present),
else from this environment (records of plugins not installed here skip).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from tests.packaging.engine_versions import ENGINE_EXTRAS


@lru_cache(maxsize=1)
def plugin_cards() -> tuple[dict, ...]:
    if os.environ.get("RL_CORE_PLUGINS_JSON"):
        report = json.loads(Path(os.environ["RL_CORE_PLUGINS_JSON"]).read_text())
    else:
        out = subprocess.run([sys.executable, "-m", "rl_core", "plugins", "--json"], capture_output=True, text=True, timeout=300)
        report = json.loads(out.stdout)
    return tuple(report["cards"])


def admitted(engine_versions: str | None, version: str) -> bool:
    """The resolver's rule (rl_core.plan.resolver.engine_version_problem): ``||`` separates alternatives; none = any."""
    if not engine_versions:
        return True
    return any(SpecifierSet(part.strip()).contains(version, prereleases=True) for part in engine_versions.split("||"))


@pytest.mark.parametrize(("dist", "extra"), sorted(ENGINE_EXTRAS, key=str), ids=lambda v: str(v))
def test_card_engine_range_admits_the_tested_versions(dist, extra):
    records = ENGINE_EXTRAS[(dist, extra)]
    if not any(c["distribution"] == dist for c in plugin_cards()):
        pytest.skip(f"{dist} is not installed in this environment (.ci/wheels.sh checks it with every plugin installed)")
    projects = {canonicalize_name(r.project) for r in records}
    cards = [c for c in plugin_cards() if c["distribution"] == dist and projects & {canonicalize_name(e) for e in (c["capabilities"].get("engine") or "").split("|")}]
    if not cards:
        pytest.skip(f"no card of {dist} names {sorted(projects)} as its engine: the resolver does not check its version")
    checked = 0
    for card in cards:
        engines = {canonicalize_name(e) for e in card["capabilities"]["engine"].split("|")}
        for record in records:
            if canonicalize_name(record.project) not in engines:
                continue
            for v in record.versions:
                checked += 1
                assert admitted(card["capabilities"].get("engine_versions"), v), (
                    f"{dist}[{extra}] installs {record.project} {v} (tested: {record.where}), but the {card['kind']} card "
                    f"{card['name']!r} admits only {card['capabilities']['engine_versions']}: `rlcore check` would refuse it"
                )
    assert checked, f"no card of {dist} names the engine(s) {[r.project for r in records]}"


def test_the_card_rule_matches_the_resolvers():
    assert admitted("==0.26.*||==0.32.*", "0.26.0") and admitted("==0.26.*||==0.32.*", "0.32.0")
    assert not admitted("==0.26.*||==0.32.*", "0.27.0")
    assert not admitted(">=0.32,<0.33", "0.26.0")
    assert admitted(None, "9.9")
