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
    fails, as a rollout engine that started and then broke would. The second rank to get there fails ``late_s``
    later, so the controller (which has the first rank's error) stops it while its child is still running: the
    case where a worker killed alone left its engine's process orphaned (and the run's output pipe open)."""

    def __init__(self, folder: str, world_size: int = 2, late_s: float = 20.0) -> None:
        self.folder = folder
        self.late_s = late_s
        self.sizes = SimpleNamespace(world_size=world_size, device="cpu")

    @property
    def config(self):
        if multiprocessing.parent_process() is None:  # the controller
            return SimpleNamespace(trainer=SimpleNamespace(torch_threads=1, seed=0))
        child = multiprocessing.get_context("spawn").Process(target=_sleep_forever, daemon=False)
        child.start()
        with open(os.path.join(self.folder, f"child-{child.pid}"), "w"):
            pass
        try:
            os.close(os.open(os.path.join(self.folder, "first"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:  # the second rank
            time.sleep(self.late_s)
        raise RuntimeError("the engine broke after starting its scheduler")
