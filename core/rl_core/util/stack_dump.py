"""``kill -USR1 <pid>``: print every thread's Python stack to stderr; the run goes on.

Installed in the ``rlcore`` controller and in every worker process, so a run that seems stuck (a collective
waiting for a peer, an engine that never answers) can be inspected without a debugger: send SIGUSR1 to the
controller and to its workers (``pkill -USR1 -f 'rl_core'``) and read the stacks in the run's output.
"""

from __future__ import annotations

import faulthandler
import signal
import sys


def install() -> None:
    """Register the SIGUSR1 stack dump (idempotent; a no-op where SIGUSR1 does not exist, e.g. Windows)."""
    if not hasattr(signal, "SIGUSR1"):
        return
    try:
        faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)
    except (ValueError, RuntimeError, OSError, AttributeError):  # not the main thread, or stderr has no file descriptor
        pass
