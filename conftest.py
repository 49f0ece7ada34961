"""Fixtures shared by the core's tests (tests/) and every plugin's (plugins/*/tests).

``one_thread``: one torch thread for a whole test module (``pytestmark = pytest.mark.usefixtures("one_thread")``):
the same kernels, so the same sums to the last bit, and no oversubscription of a small CI machine.

``tiny_model_dir``: ``tiny_model_dir(arch, **sizes)`` is :func:`rl_core.testing.tiny_model.make_tiny_model_dir`
built once per test session for each set of arguments (the function is deterministic, so every caller gets the
same weights it would build itself). The folder is shared: read it, never write into it.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def one_thread():
    from rl_core.testing.distributed import torch_threads

    with torch_threads(1):
        yield


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    from rl_core.testing.tiny_model import make_tiny_model_dir

    built: dict[tuple, str] = {}

    def get(arch: str = "llama", **sizes):
        key = (arch, tuple(sorted(sizes.items())))
        if key not in built:
            built[key] = make_tiny_model_dir(tmp_path_factory.mktemp(f"tiny_{arch}"), arch, **sizes)
        return built[key]

    return get
