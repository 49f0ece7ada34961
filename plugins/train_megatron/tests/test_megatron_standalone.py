"""rl-train-megatron stands on rl-core alone: no module of the package imports the fsdp plugin (rl_train_fsdp).

Plugins use only the core's public API (the shared engine code is :mod:`rl_core.train_engine`);
a user who installs rl-train-megatron does not get rl-train-fsdp, so importing it must not need it.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "rl_train_megatron"
FORBIDDEN = "rl_train_fsdp"


def _imported_names(tree: ast.AST) -> list[tuple[int, str]]:
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append((node.lineno, node.module))
    return names


def test_no_source_file_imports_the_fsdp_plugin():
    """Every import statement of the package, function-level ones included."""
    files = sorted(PACKAGE.rglob("*.py"))
    assert files
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: import {name}"
        for path in files
        for line, name in _imported_names(ast.parse(path.read_text(), str(path)))
        if name == FORBIDDEN or name.startswith(FORBIDDEN + ".")
    ]
    assert found == []


BLOCKED_IMPORT = """
import importlib, json, pkgutil, sys

class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name == "rl_train_fsdp" or name.startswith("rl_train_fsdp."):
            raise ImportError(f"{name} is blocked: rl-train-megatron must not need the fsdp plugin")
        return None

sys.meta_path.insert(0, Blocker())
import rl_train_megatron
names = ["rl_train_megatron"] + [m.name for m in pkgutil.walk_packages(rl_train_megatron.__path__, "rl_train_megatron.")]
for name in names:
    importlib.import_module(name)
print(json.dumps({"modules": names, "fsdp": sorted(m for m in sys.modules if m.startswith("rl_train_fsdp"))}))
"""


def test_every_module_imports_with_the_fsdp_plugin_blocked():
    pytest.importorskip("megatron.core", reason="needs megatron-core (pip install megatron-core==0.16.1)")
    proc = subprocess.run([sys.executable, "-c", BLOCKED_IMPORT], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "rl_train_megatron.engine" in result["modules"] and "rl_train_megatron.plugin" in result["modules"]
    assert result["fsdp"] == []


def test_the_distribution_does_not_require_the_fsdp_plugin():
    tomllib = pytest.importorskip("tomllib", reason="Python 3.11+ reads pyproject.toml with tomllib")
    deps = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["project"]["dependencies"]
    assert not [d for d in deps if d.replace("_", "-").lower().startswith("rl-train-fsdp")]
