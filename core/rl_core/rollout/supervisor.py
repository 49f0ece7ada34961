"""Rollout engines that die or hang are replaced: the worker's rollout calls go through an :class:`EngineSupervisor`
(docs/reliability.md, "Rollout engines that die or hang"). A hung call's daemon thread is abandoned once its engine
is killed; the step goes on with the new engine.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any, Callable

from rl_core.problems import UserError
from rl_core.util.threads import run_with_timeout


class EngineFailed(UserError):
    """The rollout engine failed more often than ``rollout.engine_restarts`` allows within the window."""


class EngineHung(RuntimeError):
    """A rollout call that did not return within ``rollout.engine_timeout_s``."""


def call_with_deadline(fn: Callable[[], Any], timeout_s: float | None) -> Any:
    """``fn()``, or :class:`EngineHung` when it has not returned after ``timeout_s`` seconds (None: wait forever)."""
    if timeout_s is None:
        return fn()
    return run_with_timeout(fn, timeout_s, lambda: EngineHung(f"no answer within rollout.engine_timeout_s={timeout_s:g} s"), "rollout-call")


class EngineSupervisor:
    """Runs rollout calls on ``engine``; replaces it (``build()``, then ``resync(engine)``) when a call fails or hangs."""

    def __init__(self, engine: Any, *, build: Callable[[], Any], resync: Callable[[Any], None] | None, name: str, rank: int,
                 timeout_s: float | None, restarts: int, window_s: float, clock: Callable[[], float] = time.monotonic,
                 log: Callable[[str], None] = lambda text: print(text, flush=True)) -> None:
        self.engine, self._build, self._resync = engine, build, resync
        self.name, self.rank, self.timeout_s, self.restarts, self.window_s = name, rank, timeout_s, restarts, window_s
        self._clock, self._log = clock, log
        self._recent: deque[float] = deque()
        self.recoveries = 0

    def generate(self, batch: Any, params: Any) -> Any:
        while True:
            try:
                return call_with_deadline(lambda engine=self.engine: engine.generate(batch, params), self.timeout_s)
            except UserError:
                raise  # a bad input or setting: the same on any engine, not a failure to recover from
            except Exception as exc:  # noqa: BLE001 - an engine's failure, whatever its type: replace the engine
                self._replace(exc, len(batch))

    def _replace(self, exc: BaseException, requests: int) -> None:
        now = self._clock()
        while self._recent and now - self._recent[0] > self.window_s:
            self._recent.popleft()
        what = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ''}".rstrip(": ")
        if len(self._recent) >= self.restarts:
            raise EngineFailed(
                f"the {self.name} rollout engine on rank {self.rank} failed {len(self._recent) + 1} times within "
                f"rollout.engine_restart_window_s={self.window_s:g} s (rollout.engine_restarts={self.restarts}); the last: {what}. "
                "Look at the engine's own log above; raise rollout.engine_restarts to tolerate more"
            ) from exc
        self._recent.append(now)
        self.recoveries += 1
        self._kill(self.engine)
        if self._resync is None:
            raise EngineFailed(
                f"the {self.name} rollout engine on rank {self.rank} failed ({what}) in a rollout pool of its own, whose "
                "weights arrive from the trainer by broadcast: it cannot be rebuilt with the current weights here"
            ) from exc
        self.engine = self._build()
        self._resync(self.engine)  # the actor's current weights, verified as every sync is
        self._log(f"note: the {self.name} rollout engine on rank {self.rank} {'hung' if isinstance(exc, EngineHung) else 'failed'} ({what}): "
                  f"replaced ({len(self._recent)} of {self.restarts} allowed within {self.window_s:g} s), the current weights loaded and "
                  f"verified, the call's {requests} requests submitted again")

    @staticmethod
    def _kill(engine: Any) -> None:
        for method in ("kill", "shutdown"):
            fn = getattr(engine, method, None)
            if callable(fn):
                try:
                    fn()
                except Exception:  # noqa: BLE001 - a dead engine may fail to stop: it is dropped either way
                    pass
                return
