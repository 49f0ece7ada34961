"""rl_core_testing.bounded_run: a hung ``rlcore``-like subprocess fails with its stacks and is killed, children too."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from rl_core_testing.bounded_run import communicate_bounded, descendants

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc") or not hasattr(os, "fork"), reason="needs Linux /proc")

HUNG = textwrap.dedent(
    """
    import subprocess, sys, time
    from rl_core.util import stack_dump
    stack_dump.install()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    print("CHILD-PID=%d" % child.pid, flush=True)
    def waiting_for_a_peer():
        time.sleep(600)
    waiting_for_a_peer()
    """
)


def test_a_hang_fails_with_the_stack_and_leaves_no_process():
    proc = subprocess.Popen([sys.executable, "-c", HUNG], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    with pytest.raises(AssertionError) as info:
        communicate_bounded(proc, timeout=5)
    message = str(info.value)
    assert "did not finish within 5 s" in message
    assert "waiting_for_a_peer" in message  # the SIGUSR1 stack dump of the hung process
    child = int(message.split("CHILD-PID=")[-1].split()[0])
    assert proc.returncode is not None
    assert not os.path.exists(f"/proc/{child}") or open(f"/proc/{child}/stat").read().split(") ", 1)[1][0] == "Z"


def test_a_run_that_ends_returns_its_output():
    proc = subprocess.Popen([sys.executable, "-c", "print('done')"], stdout=subprocess.PIPE, text=True)
    assert communicate_bounded(proc, timeout=60).strip() == "done"
    assert descendants(proc.pid) == []
