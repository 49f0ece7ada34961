"""`rlcore plugins`: what is installed, from which distribution, with which capabilities."""

from __future__ import annotations

import json
import sys

from rl_core.cards import CARD_TYPES
from rl_core.plugins import Registry, get_registry


def add_parser(sub) -> None:
    p = sub.add_parser("plugins", help="list installed backends, rewards, estimators and losses")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def registry_report(registry: Registry) -> dict:
    cards = []
    for kind in CARD_TYPES:
        for name in registry.names(kind):
            card = registry.cards[kind][name]
            prov = card.provider
            cards.append({
                "name": name, "kind": kind, "distribution": prov.distribution if prov else "", "version": prov.version if prov else "",
                "entry_point": prov.entry_point if prov else "", "description": card.description, "capabilities": card.capabilities(),
            })
    return {
        "cards": cards,
        "plugins": registry.plugins,
        "errors": [
            {"distribution": e.distribution, "version": e.version, "entry_point": e.entry_point, "error": e.error}
            for e in registry.errors
        ],
        "conflicts": [c.describe() for c in registry.conflicts],
    }


def print_load_problems(registry: Registry, file=None) -> None:
    file = file or sys.stderr  # looked up per call: a default bound at import outlives a replaced sys.stderr
    for e in registry.errors:
        print(f"error: {e.describe()}", file=file)
    for c in registry.conflicts:
        print(f"error: {c.describe()}", file=file)


def _caps(caps: dict) -> str:
    parts = []
    for k, v in caps.items():
        if v in (None, False, (), []) and k not in ("needs_critic", "needs_groups"):
            continue
        if isinstance(v, list):
            v = ",".join(map(str, v))
        parts.append(f"{k}={v}")
    return " ".join(parts)


def run(args) -> int:
    registry = get_registry()
    report = registry_report(registry)
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        for kind in CARD_TYPES:
            rows = [c for c in report["cards"] if c["kind"] == kind]
            if not rows:
                continue
            print(f"{kind}:")
            for c in rows:
                print(f"  {c['name']:<28} {c['distribution']} {c['version']}".rstrip())
                caps = _caps(c["capabilities"])
                if caps:
                    print(f"  {'':<28} {caps}")
        print_load_problems(registry, file=sys.stdout)
    return 1 if registry.errors or registry.conflicts else 0
