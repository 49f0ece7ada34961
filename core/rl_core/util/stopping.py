"""Stopping a run on SIGINT / SIGTERM without losing it: in the loop, a first signal finishes and checkpoints the
current step; a second one, or one outside the loop, stops at once. Exit status ``128 + signal`` (130, 143). Workers
ignore these signals: the controller stops them, so none prints a traceback.
"""

from __future__ import annotations

import signal
import sys
import threading

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(BaseException):
    """The run was stopped by a signal (a BaseException, like KeyboardInterrupt: no ``except Exception`` swallows it)."""

    def __init__(self, signum: int, message: str = "") -> None:
        super().__init__(message or signal_name(signum))
        self.signum = signum
        self.message = message

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def ignore_stop_signals() -> None:
    """In a worker process: leave SIGINT / SIGTERM to the controller, which stops the workers itself."""
    for s in SIGNALS:
        signal.signal(s, signal.SIG_IGN)


class StopSignals:
    """Installs the controller's SIGINT / SIGTERM handlers (main thread only). While ``graceful`` (set by the loop), a
    first signal only asks it to stop after the current step; otherwise the handler raises :class:`Interrupted`."""

    def __init__(self) -> None:
        self.requested: int | None = None
        self.graceful = False
        self._saved: dict[int, object] = {}

    def install(self) -> "StopSignals":
        """(Re)install the handlers: Ray's ``ray.init`` replaces the SIGTERM handler with its own."""
        if threading.current_thread() is threading.main_thread():
            for s in SIGNALS:
                previous = signal.signal(s, self._handle)
                self._saved.setdefault(s, previous)
        return self

    def restore(self) -> None:
        for s, handler in self._saved.items():
            signal.signal(s, handler)
        self._saved.clear()

    def __enter__(self) -> "StopSignals":
        return self.install()

    def __exit__(self, *exc) -> None:
        self.restore()

    def _handle(self, signum, frame) -> None:
        if self.graceful and self.requested is None:
            self.requested = signum
            name = signal_name(signum)
            print(f"\n{name}: stopping after the current step, which is then saved as a checkpoint "
                  f"({name} again stops at once without saving it)", file=sys.stderr, flush=True)
            return
        raise Interrupted(signum)


def is_failure(exc: BaseException) -> bool:
    """An error to report, as opposed to a signal / Ctrl-C that must propagate (torch's ``CheckpointException`` is a
    ``BaseException`` yet a failed save or load)."""
    return isinstance(exc, Exception) or type(exc).__name__ == "CheckpointException"
