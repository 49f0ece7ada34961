"""Shared test helpers.

`shared_data` points at ../shared/data (present on the project's machines and
CI, absent in a user's clone: tests that need it skip with that reason).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# RL_CORE_SHARED_DATA: .ci/run sets it for the README's copy of the checkout, which lives elsewhere
SHARED_DATA = Path(os.environ.get("RL_CORE_SHARED_DATA") or REPO.parent / "shared" / "data")


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"needs the shared data folder {SHARED_DATA} (present on the project's machines, not in a clone)")
    return SHARED_DATA


def pip_install_target(src: Path, target: Path) -> Path:
    """Really pip-install the distribution at ``src`` into ``target`` (no network)."""
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index", "--target", str(target), str(src)],
        check=True,
        capture_output=True,
        text=True,
    )
    return target


def run_rlcore(*args: str, pythonpath: list[Path] = (), env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    full_env = dict(os.environ)
    if pythonpath:
        full_env["PYTHONPATH"] = os.pathsep.join([*map(str, pythonpath), full_env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "rl_core", *args], capture_output=True, text=True, env=full_env, cwd=cwd, timeout=300)
