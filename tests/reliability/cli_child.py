"""`rlcore` in a child process started by a forkserver that has the heavy modules preloaded (fast starts: the
``rlcore_forkserver`` fixture of the root conftest.py).

Used by the tests that kill or signal a real run (test_signals.py, test_kill_resume.py, tests/e2e/test_resume.py):
the child's target must live in an importable module for the forkserver to find it.
"""

from __future__ import annotations

import os
import sys


def run_cli(argv: list[str], log: str) -> None:
    """Process target: ``rlcore *argv`` with stdout and stderr appended to ``log``; exits with its code."""
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    from rl_core.cli.main import main

    code = main(argv)
    sys.stdout.flush()  # os._exit skips the interpreter's own flush
    sys.stderr.flush()
    os._exit(code)

