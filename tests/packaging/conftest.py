"""Every distribution's sdist and wheel, built once per test session.

``RL_CORE_WHEELS_DIR=DIR`` reuses the wheels .ci/wheels.sh built (one per
distribution, from this tree); otherwise they are built here with
``python -m build --no-isolation`` (the dev venv has the build requirements;
.ci/wheels.sh builds with isolation, as a user's pip does).
"""

from __future__ import annotations

import importlib.util
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import attrs
import pytest

from tests.packaging.wheel_check import build, distribution_dirs, find_built, project_table


@attrs.frozen
class Built:
    name: str
    dist_dir: Path
    sdist: Path
    wheel: Path


@pytest.fixture(scope="session")
def built(tmp_path_factory) -> dict[str, Built]:
    """Distribution name (``rl-core``, ``rl-train-fsdp``, ...) -> its source folder, sdist and wheel."""
    dirs = distribution_dirs()
    if os.environ.get("RL_CORE_WHEELS_DIR"):
        out = Path(os.environ["RL_CORE_WHEELS_DIR"])
        pairs = [find_built(out, project_table(d)["project"]) for d in dirs]
    else:
        if importlib.util.find_spec("build") is None:
            pytest.skip("building wheels needs the `build` package: pip install build (requirements-dev.txt has it)")
        out = tmp_path_factory.mktemp("wheels")
        with ThreadPoolExecutor(max_workers=2) as pool:
            pairs = list(pool.map(lambda d: build(d, out, isolation=False), dirs))
    return {project_table(d)["project"]["name"]: Built(project_table(d)["project"]["name"], d, s, w) for d, (s, w) in zip(dirs, pairs)}
