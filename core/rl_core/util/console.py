"""What the console says during long silent phases, and whether other processes crowd the CPU.

:func:`phase` says what a slow step is doing after :data:`QUIET_S` seconds, then every :data:`EVERY_S` seconds, and
its total at the end (nothing if it is quick). :func:`cpu_load` compares the load average with this process's cores
(`rlcore doctor` prints it; `rlcore train` warns when the cores are already busy).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from typing import Iterator, TextIO

QUIET_S = 2.0
EVERY_S = 30.0
BUSY_RATIO = 1.5  # load average per usable core above which the CPU counts as busy


def _fmt(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


@contextlib.contextmanager
def phase(what: str, out: TextIO | None = None, *, quiet_s: float = QUIET_S, every_s: float = EVERY_S) -> Iterator[None]:
    """``with phase("loading the model"): ...``: lines with the elapsed time while it runs, if it runs long."""
    out = out or sys.stdout
    start = time.monotonic()
    said = threading.Event()
    done = threading.Event()

    def tick() -> None:
        wait = quiet_s
        while not done.wait(wait):
            elapsed = time.monotonic() - start
            print(f"{what}... ({_fmt(elapsed)} so far)" if said.is_set() else f"{what}...", file=out, flush=True)
            said.set()
            wait = every_s

    thread = threading.Thread(target=tick, name="rl-core-phase", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        if said.is_set():
            print(f"{what}: done in {_fmt(time.monotonic() - start)}", file=out, flush=True)


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def cpu_load() -> tuple[float, int] | None:
    """(1-minute load average, usable cores), or None where the OS does not report a load average."""
    try:
        return os.getloadavg()[0], usable_cores()
    except (AttributeError, OSError):
        return None


def busy_cpu_warning(own_processes: int = 0) -> str | None:
    """A warning when other processes keep the cores busy (``own_processes``: this run's, already counted in the load)."""
    load = cpu_load()
    if load is None:
        return None
    avg, cores = load
    others = max(0.0, avg - own_processes)
    if others <= BUSY_RATIO * cores:
        return None
    return (f"the CPU is busy: load average {avg:.1f} on {cores} core{'s' if cores > 1 else ''} from other processes; "
            f"a run here takes ~{max(2, round(others / cores + 1))}x longer per step than on an idle machine (long silent "
            "phases are slow, not hung); `top` shows who")
