"""The python tool's sandbox: each escape attempt is contained, reported as a tool error, and leaves no process."""

from __future__ import annotations

import asyncio
import os
import socket

import pytest

from rl_core.agent import sandbox
from rl_core.agent.sandbox import SandboxLimits, containment, run_code
from rl_core.agent.tools import call_tool, tool_from_function

LIMITS = SandboxLimits(wall_s=1.0, cpu_s=1, memory_mb=512)


def _tool():
    return tool_from_function(lambda code: run_code(code, LIMITS), schema=__import__("rl_core.agent.builtin", fromlist=["x"]).PYTHON_SCHEMA)


def _run(code: str):
    return asyncio.run(call_tool(_tool(), "python", {"code": code}, timeout_s=20))


def _ours() -> set[int]:
    """Processes under this test process (any that the sandbox left would show here or in its session)."""
    me = os.getpid()
    procs = sandbox._processes()
    found, changed = {me}, True
    while changed:
        changed = False
        for pid, (ppid, _, _) in procs.items():
            if pid not in found and ppid in found:
                found.add(pid)
                changed = True
    return found - {me}


def test_ordinary_code_runs():
    r = _run("print(sum(range(10)))")
    assert r.ok and r.text.strip() == "45"


@pytest.mark.parametrize(
    "case,code,why",
    [
        ("infinite loop", "while True: pass", "timed out|CPU"),
        ("fork bomb", "import os\nwhile True:\n    try: os.fork()\n    except OSError: pass", "timed out|CPU|failed"),
        ("10 GiB allocation", "x = bytearray(10 * 1024**3)", "MemoryError"),
        ("write outside its dir", "open(os.path.join({repo!r}, 'SANDBOX_ESCAPE'), 'w').write('x')", "Read-only|Permission denied|No such file"),
        ("parent's env secrets", "import os\nprint(os.environ['RLCORE_TEST_SECRET'])", "KeyError"),
        ("parent's env via /proc", "import os\nenv = open(f'/proc/{{os.getppid()}}/environ').read()\nassert 'RLCORE_TEST_SECRET' not in env\nraise SystemExit('no secret')", "no secret|Permission denied"),
        ("socket to 127.0.0.1", "import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)", "Connection refused|Network is unreachable|timed out|Permission"),
        ("output flood", "while True: print('x' * 1000)", "too large|printed more"),
    ],
)
@pytest.mark.parametrize("mode", ["bwrap", "unshare-net"])
def test_escapes_are_contained_and_are_tool_errors(mode, case, code, why, monkeypatch, tmp_path):
    """With bubblewrap, and with the fallback (network namespace, rlimits, the nobody user when root)."""
    if mode == "bwrap" and containment() != "bwrap":
        pytest.skip("bubblewrap (bwrap) is not installed or does not work here")
    if mode == "unshare-net":
        if not sandbox._works(["unshare", "-rn", "true"]):
            pytest.skip("unshare -rn does not work here")
        if os.geteuid() != 0 and case == "write outside its dir":
            pytest.skip("without bwrap a non-root user's own files are writable (docs/reliability.md)")
        monkeypatch.setattr(sandbox, "containment", lambda: "unshare-net")
    monkeypatch.setenv("RLCORE_TEST_SECRET", "hunter2")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        r = _run("import os\n" + code.format(repo=repo, port=server.getsockname()[1]))
    finally:
        server.close()
    assert not r.ok and r.status == "error", (case, r)
    assert "hunter2" not in r.text
    import re

    assert re.search(why, r.text), (case, r.text)
    assert not os.path.exists(os.path.join(repo, "SANDBOX_ESCAPE"))
    assert not _ours(), f"{case}: processes left behind"


def test_containment_is_reported():
    assert containment() in ("bwrap", "unshare-net", "rlimits")
