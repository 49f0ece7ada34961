"""The python tool's sandbox: each escape attempt is contained, reported as a tool error, and leaves no process."""

from __future__ import annotations

import asyncio
import os
import re
import socket
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from rl_agent import sandbox
from rl_agent.sandbox import SandboxLimits, containment, run_code
from rl_agent.tools import call_tool, tool_from_function

LIMITS = SandboxLimits(wall_s=1.0, cpu_s=1, memory_mb=512)
# for programs that must finish: a wall-clock limit a loaded CI machine does not reach by accident (at a load
# average of ~19 on 2 cores, starting bwrap + python and sleeping 0.5 s took over 1 s)
ROOMY = SandboxLimits(wall_s=15.0, cpu_s=1, memory_mb=512)


def _tool(limits: SandboxLimits = LIMITS):
    return tool_from_function(lambda code: run_code(code, limits), schema=__import__("rl_agent.plugin", fromlist=["x"]).PYTHON_SCHEMA)


def _run(code: str, limits: SandboxLimits = LIMITS):
    return asyncio.run(call_tool(_tool(limits), "python", {"code": code}, timeout_s=20))


_BEFORE: set[int] = set()


@pytest.fixture(autouse=True)
def _children_before():
    """The processes already under this test process when a test starts (an earlier test's forkserver or scorer pool,
    in a whole-suite run): not the sandbox's, so not counted as left behind."""
    _BEFORE.clear()
    _BEFORE.update(_descendants())
    yield


def _ours() -> set[int]:
    """Processes under this test process that the test started (any that the sandbox left would show here)."""
    return _descendants() - _BEFORE


def _descendants() -> set[int]:
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
    r = _run("print(sum(range(10)))", ROOMY)
    assert r.ok and r.text.strip() == "45"


@pytest.mark.parametrize(
    "case,code,why",
    [
        ("infinite loop", "while True: pass", "timed out|CPU"),
        ("fork bomb", "import os\nwhile True:\n    try: os.fork()\n    except OSError: pass", "timed out|CPU|failed"),
        ("10 GiB allocation", "x = bytearray(10 * 1024**3)", "MemoryError"),
        ("write outside its dir", "open(os.path.join({repo!r}, 'SANDBOX_ESCAPE'), 'w').write('x')", "Read-only|Permission denied|No such file"),
        ("parent's env secrets", "import os\nprint(os.environ['RLCORE_TEST_SECRET'])", "KeyError"),
        ("parent's env via /proc", "import os\nenv = open(f'/proc/{{os.getppid()}}/environ').read()\nassert 'RLCORE_TEST_SECRET' not in env\nraise SystemExit('no secret')", "no secret|Permission denied|No such file"),
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
        # a case that is not expected to end by a limit of time gets room, so load alone cannot turn it into one
        r = _run("import os\n" + code.format(repo=repo, port=server.getsockname()[1]), LIMITS if "timed out" in why else ROOMY)
    finally:
        server.close()
    assert not r.ok and r.status == "error", (case, r)
    assert "hunter2" not in r.text
    assert re.search(why, r.text), (case, r.text)
    assert not os.path.exists(os.path.join(repo, "SANDBOX_ESCAPE"))
    assert not _ours(), f"{case}: processes left behind"


def test_containment_is_reported():
    assert containment() in ("bwrap", "unshare-net", "rlimits")


def _modes():
    """Both containments, each skipped where this machine cannot run it."""
    return [
        pytest.param("bwrap", marks=pytest.mark.skipif(containment() != "bwrap", reason="bubblewrap (bwrap) is not installed or does not work here")),
        pytest.param("unshare-net", marks=pytest.mark.skipif(not sandbox._works(["unshare", "-rn", "true"]), reason="unshare -rn does not work here")),
    ]


def _use(mode, monkeypatch):
    monkeypatch.setattr(sandbox, "containment", lambda: mode)


# {n} children that each live 0.5 s (n + 1 processes at once), then prints "{tag} {n}"
FORKS = (
    "import os, time\nkids = []\nfor _ in range({n}):\n    pid = os.fork()\n    if pid == 0:\n        time.sleep(0.5)\n"
    "        os._exit(0)\n    kids.append(pid)\nfor k in kids:\n    os.waitpid(k, 0)\nprint('{tag}', len(kids))"
)


@pytest.mark.skipif(os.geteuid() != 0, reason="a run gets a user of its own only when rl-core runs as root")
@pytest.mark.parametrize("mode", _modes())
def test_concurrent_runs_each_have_their_own_process_budget(mode, monkeypatch):
    """12 programs of 5 processes each at once (60, over one budget of 32): each run counts only its own processes.

    Before each run had a user of its own, they all ran as ``nobody``, whose 32 processes were shared: with bwrap
    most starts failed ("bwrap: Creating new namespace failed: Resource temporarily unavailable")."""
    _use(mode, monkeypatch)
    limits = SandboxLimits(wall_s=20.0, cpu_s=5, memory_mb=512, max_processes=8)
    with ThreadPoolExecutor(12) as pool:
        outs = list(pool.map(lambda i: _outcome(FORKS.format(n=4, tag=f"run{i}"), limits), range(12)))
    assert outs == [f"run{i} 4" for i in range(12)]
    assert not _ours()


@pytest.mark.skipif(os.geteuid() != 0, reason="a run gets a user of its own only when rl-core runs as root")
@pytest.mark.parametrize("mode", _modes())
def test_a_fork_bomb_does_not_starve_the_runs_beside_it(mode, monkeypatch):
    """While one program exhausts its process limit, other programs start, fork and finish normally."""
    _use(mode, monkeypatch)
    bomb = "import os\nwhile True:\n    try: os.fork()\n    except OSError: pass"
    with ThreadPoolExecutor(1) as pool:
        bombing = pool.submit(_outcome, bomb, SandboxLimits(wall_s=3.0, cpu_s=2, memory_mb=512))
        time.sleep(0.5)
        others = [_outcome(FORKS.format(n=3, tag=f"beside{i}"), ROOMY) for i in range(3)]
        assert re.search("timed out|CPU|failed", bombing.result()), bombing.result()
    assert others == [f"beside{i} 3" for i in range(3)]
    assert not _ours()


@pytest.mark.parametrize("mode", _modes())
def test_a_daemon_that_leaves_the_tree_is_killed_too(mode, monkeypatch):
    """A double fork into a new session (parent gone, so neither the tree nor the session finds it) is killed too:
    with bwrap by its pid namespace; otherwise, as root, as a process of the run's own user."""
    if mode == "unshare-net" and os.geteuid() != 0:
        pytest.skip("without bwrap, a daemon is found by the run's own user, which only a root rl-core has")
    _use(mode, monkeypatch)
    marker = f"rlcore-daemon-{os.getpid()}-{mode}"
    code = (
        "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        f"        os.execv('/bin/sleep', [{marker!r}, '30'])\n    os._exit(0)\ntime.sleep(0.3)\nprint('parent done')"
    )
    assert _outcome(code, ROOMY) == "parent done"
    deadline = time.monotonic() + 5
    while (left := _with_marker(marker)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not left, f"{mode}: the daemon survived the run: pids {left}"


@pytest.mark.skipif(containment() != "bwrap", reason="bubblewrap (bwrap) is not installed or does not work here")
def test_a_start_refused_by_the_process_limit_says_so():
    """bwrap needs 2 processes of its own before the program: a limit of 1 refuses the start, and the error names
    the limit (not "the program failed", which would blame the model's code)."""
    r = _run("print('never')", SandboxLimits(max_processes=1))
    assert not r.ok and r.status == "error"
    assert "process limit" in r.text and "SandboxLimits.max_processes 1" in r.text and "never" not in r.text, r.text


def _outcome(code: str, limits: SandboxLimits) -> str:
    """The program's output, or the sandbox's error text."""
    try:
        return run_code(code, limits).strip()
    except sandbox.SandboxError as e:
        return str(e)


def _with_marker(marker: str) -> list[int]:
    found = []
    for pid in sandbox._processes():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    found.append(pid)
        except OSError:
            pass
    return found
