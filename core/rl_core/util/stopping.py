"""Stopping a run on SIGINT (Ctrl-C) or SIGTERM (``kill``, Slurm, a container stop) without losing it.

During the training loop the first signal is a request: the current step
finishes, a checkpoint of it is saved (even before the first scheduled one,
even with ``trainer.save_freq=-1``), and the run ends with one line saying so
and that the same command resumes. A second signal, or a signal outside the
loop (building the models, the first validation), stops at once: the line
says what was kept (the last checkpoint, or nothing) and how to keep more.

Exit status: ``128 + signal number``, as a shell reports a process killed by
it: 130 for SIGINT, 143 for SIGTERM. Workers do not react to these signals
themselves (a terminal's Ctrl-C reaches every process of the group): the
controller stops them, so no worker prints a traceback.
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
    """Installs the controller's SIGINT / SIGTERM handlers (main thread only; elsewhere a no-op).

    ``graceful``: whether a first signal only asks the loop to stop after the current step (the loop sets it
    while it can honour that); otherwise, and on a second signal, the handler raises :class:`Interrupted`.
    """

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
            print(
                f"\n{name}: stopping after the current step, which is then saved as a checkpoint "
                f"({name} again stops at once without saving it)",
                file=sys.stderr,
                flush=True,
            )
            return
        raise Interrupted(signum)


def is_failure(exc: BaseException) -> bool:
    """An error to report (a full disk, a bad file), as opposed to a signal / Ctrl-C that must propagate.

    torch's ``CheckpointException`` derives from ``BaseException``, not
    ``Exception``, yet it is a failed save or load (a full disk on one rank),
    never a request to stop.
    """
    return isinstance(exc, Exception) or type(exc).__name__ == "CheckpointException"
