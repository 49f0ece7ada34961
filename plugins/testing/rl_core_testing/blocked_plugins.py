"""Tests of what a config gets when a plugin is not installed: the registry reloaded with distributions blocked.

    @pytest.fixture
    def without_it():
        with blocked_plugins("rl-hf-decode"):
            yield

Inside the block ``RL_CORE_BLOCK_PLUGINS`` names the distributions and ``get_registry()`` is reloaded without them;
after it the variable is as before and the registry reloaded again, so later tests see every installed plugin.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import pytest
from rl_core.plugins import BLOCK_ENV, get_registry


@contextlib.contextmanager
def blocked_plugins(*dists: str) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as env:
        env.setenv(BLOCK_ENV, ",".join(dists))
        get_registry(reload=True)
        try:
            yield
        finally:
            env.undo()
            get_registry(reload=True)
