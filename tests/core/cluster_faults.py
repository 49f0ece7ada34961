"""Picklable stand-ins for a stack whose workers fail at start (tests/core/test_cluster_exit.py)."""

from __future__ import annotations

import multiprocessing
import os
import time
from types import SimpleNamespace


def _sleep_forever() -> None:
    time.sleep(3600)


class EngineChildThenFailure:
    """In the controller: a stack of ``world_size`` CPU ranks. In a worker (a spawned process): reading ``config``
    starts a non-daemonic child that never ends (as SGLang's scheduler is), writes its pid under ``folder``, and
    fails, as a rollout engine that started and then broke would."""

    def __init__(self, folder: str, world_size: int = 2) -> None:
        self.folder = folder
        self.sizes = SimpleNamespace(world_size=world_size, device="cpu")

    @property
    def config(self):
        if multiprocessing.parent_process() is None:  # the controller
            return SimpleNamespace(trainer=SimpleNamespace(torch_threads=1, seed=0))
        child = multiprocessing.get_context("spawn").Process(target=_sleep_forever, daemon=False)
        child.start()
        with open(os.path.join(self.folder, f"child-{child.pid}"), "w"):
            pass
        raise RuntimeError("the engine broke after starting its scheduler")
