"""Wait for a ``rlcore`` subprocess with a bound; on timeout show where every process of the run was.

A test that starts ``rlcore train`` and waits for it must not turn a hang into a bare ``TimeoutExpired``: this
sends SIGUSR1 to the run's process tree (rl-core's controller and workers print every thread's stack,
:mod:`rl_core.util.stack_dump`), kills the tree (and the process group, for a process started with
``start_new_session=True``), and fails with the tail of the run's output.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time


def descendants(pid: int) -> list[int]:
    """The pids below ``pid`` (Linux ``/proc``; empty elsewhere), children before grandchildren."""
    children: dict[int, list[int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(0), []):
            found.append(child)
            todo.append(child)
    return found


def _signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _leads_its_group(pid: int) -> bool:
    try:
        return os.getpgid(pid) == pid
    except (ProcessLookupError, PermissionError, OSError):
        return False


def communicate_bounded(proc: subprocess.Popen, timeout: float, *, tail: int = 12000) -> str:
    """``proc.communicate(timeout)``'s output; on timeout, stacks + kill + AssertionError with the output's tail."""
    try:
        return proc.communicate(timeout=timeout)[0]
    except subprocess.TimeoutExpired:
        tree = [proc.pid, *descendants(proc.pid)]
        _signal_all(tree, signal.SIGUSR1)  # rl-core processes print their stacks; others (engine children) end
        time.sleep(3)
        _signal_all([proc.pid, *descendants(proc.pid), *tree], signal.SIGKILL)
        if _leads_its_group(proc.pid):  # started with start_new_session=True: orphans of the tree are in it too
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            out = proc.communicate(timeout=30)[0] or ""
        except subprocess.TimeoutExpired:  # an orphan outside the tree still holds the output pipe open
            proc.kill()
            out = "(the output could not be read: a process outside the tree holds its pipe; start it with start_new_session=True)"
        if isinstance(out, bytes):
            out = out.decode(errors="replace")
        raise AssertionError(
            f"`{' '.join(map(str, proc.args))}` did not finish within {timeout:.0f} s; its processes' stacks (SIGUSR1) "
            f"and the last {tail} characters of its output:\n{out[-tail:]}"
        ) from None
