"""Run-time code reads no registry (issue 46): workers, engines and the loop get what the Plan loaded.

Read from the source (no imports), functions' bodies included: in a run-time module nothing names
``get_registry`` (a call, an import, an attribute), and no function has a ``registry`` parameter defaulting to None
(a silent fallback to a registry lookup). Check-time code (``plan``, ``config``, ``cli``) and the registry's own
modules may use it; a function that needs the cards outside a run takes ``registry`` as a required argument.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[2] / "core" / "rl_core"

#: run time: what workers, engines and the loop execute
RUN_TIME = ("algorithms", "rollout", "trainer", "placement", "train_engine", "rewards", "checkpoints", "data", "util",
            "batch", "modeling", "logprobs", "weight_sync_check", "observers", "backends", "run_kind")
#: check / command time, the registry itself and the public declarations (hooks, cards): may name the registry
CHECK_TIME = ("plan", "config", "cli", "plugins", "plugin_api", "cards", "card_options", "hookspecs", "problems",
              "engine_versions", "models", "__init__", "__main__")


def _top(path: Path) -> str:
    rel = path.relative_to(CORE)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _run_time_files() -> list[Path]:
    return sorted(p for p in CORE.rglob("*.py") if _top(p) in RUN_TIME)


def registry_uses(source: str) -> list[str]:
    """``line: what`` for each use of ``get_registry`` and each ``registry`` parameter defaulting to None."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name) and node.id == "get_registry" or isinstance(node, ast.Attribute) and node.attr == "get_registry":
            found.append(f"{node.lineno}: names get_registry")
        elif isinstance(node, (ast.Import, ast.ImportFrom)) and any(a.name.split(".")[-1] == "get_registry" for a in node.names):
            found.append(f"{node.lineno}: imports get_registry")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            a = node.args
            positional = a.posonlyargs + a.args
            pairs = list(zip(positional[len(positional) - len(a.defaults):], a.defaults)) + list(zip(a.kwonlyargs, a.kw_defaults))
            for arg, default in pairs:
                if arg.arg == "registry" and isinstance(default, ast.Constant) and default.value is None:
                    found.append(f"{node.lineno}: {getattr(node, 'name', 'lambda')}(registry=None)")
    return found


def test_every_core_module_is_classified():
    tops = {_top(p) for p in CORE.rglob("*.py")}
    unknown = sorted(tops - set(RUN_TIME) - set(CHECK_TIME))
    assert not unknown, f"classify these core modules as run time or check time in this test: {unknown}"
    assert _run_time_files(), "no run-time modules found"


def test_run_time_modules_read_no_registry():
    bad = [f"{p.relative_to(CORE.parent)}:{use}" for p in _run_time_files() for use in registry_uses(p.read_text())]
    assert not bad, ("run-time code takes what the Plan loaded (its cards, loaded functions); a helper that needs the registry "
                     "belongs to plan/ or takes it as a required argument:\n" + "\n".join(bad))


@pytest.mark.parametrize("source, expected", [
    ("from rl_core.plugins import get_registry\n", ["1: imports get_registry"]),
    ("def f(x):\n    from rl_core.plugins import get_registry\n    return get_registry()\n", ["2: imports get_registry", "3: names get_registry"]),
    ("import rl_core.plugins\ndef f():\n    return rl_core.plugins.get_registry().cards\n", ["3: names get_registry"]),
    ("def f(config, registry=None):\n    pass\n", ["1: f(registry=None)"]),
    ("class M:\n    def __init__(self, cfg, *, registry: 'Any' = None, n=1):\n        pass\n", ["2: __init__(registry=None)"]),
    ("g = lambda registry=None: registry\n", ["1: lambda(registry=None)"]),
    # what run-time code may do: take the registry as a required argument, or default something else to None
    ("def f(config, registry, capability=None):\n    return registry.cards\n", []),
    ("def f(config, *, registry, card=None):\n    pass\n", []),
])
def test_the_reader_catches_both(source, expected):
    assert sorted(registry_uses(source)) == sorted(expected)
