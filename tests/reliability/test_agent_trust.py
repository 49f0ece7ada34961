"""The agent side of issue 47, as the probe tried it: model output, tools, agent loops, the python tool's sandbox
without bubblewrap, orphans, and what ``rlcore check`` refuses. One tally row per kind of case; each case is
one record (the plugin's own tests, plugins/agent/tests/test_agent_*trust*, *fuzz*, *fallback*, *refusals*, go
further)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

from tests.reliability import tally

pytest.importorskip("rl_agent", reason="needs the rl-agent plugin (pip install -e plugins/agent)")

from rl_agent import sandbox  # noqa: E402
from rl_agent.parsers import HermesParser  # noqa: E402
from rl_agent.runner import AgentLoopError, check_trajectory  # noqa: E402
from rl_agent.loop import Trajectory  # noqa: E402
from rl_agent.tools import Tool, call_tool  # noqa: E402

OUTPUT = {
    "1,000 [ in a tool call": "<tool_call>" + "[" * 1000 + "</tool_call>",
    "100,000 { in a tool call": "<tool_call>" + "{" * 100_000 + "</tool_call>",
    "a bare 5,000-digit number": "<tool_call>" + "9" * 5000 + "</tool_call>",
    "a lone surrogate escape": '<tool_call>{"name": "\\ud800", "arguments": {}}</tool_call>',
    "invalid UTF-8 bytes": b"<tool_call>\xff\xfe</tool_call>",
    "3 MB of text": "y" * 3_000_000,
    "1 MB of unclosed <tool_call>": "<tool_call>" * 100_000,
}


@pytest.mark.parametrize("case", list(OUTPUT))
def test_model_output_is_data(case):
    start = time.monotonic()
    try:
        _, calls = HermesParser().parse(OUTPUT[case])
        ok = all(c.error or c.name for c in calls) and time.monotonic() - start < 5
    except BaseException as exc:  # noqa: BLE001 - recorded as not ok
        ok, calls = False, exc
    tally.record("agent_output", case, ok)
    assert ok, calls


def _exit():
    sys.exit(3)


def _interrupt():
    raise KeyboardInterrupt


def _hard_exit():
    os._exit(3)


async def _async_exit():
    sys.exit(4)


async def _async_hang():
    await asyncio.sleep(3600)


TOOLS = {
    "sys.exit": (_exit, "SystemExit(3)"),
    "KeyboardInterrupt": (_interrupt, "KeyboardInterrupt"),
    "os._exit": (_hard_exit, "os._exit(3)"),
    "async sys.exit (verl-style tools are async)": (_async_exit, "SystemExit(4)"),
    "a lone surrogate result": (lambda: "a \ud800", "not valid Unicode"),
    "a 50 MB result": (lambda: "x" * 50_000_000, "characters, more than"),
    "a hang": (_async_hang, "timed out"),
}


@pytest.mark.parametrize("case", list(TOOLS))
def test_a_tool_cannot_end_the_run(case):
    fn, shown = TOOLS[case]
    tool = Tool(name="t", schema={"type": "function", "function": {"name": "t", "parameters": {"type": "object", "properties": {}}}}, fn=fn)
    pid = os.getpid()
    try:
        result = asyncio.run(call_tool(tool, "t", {}, timeout_s=0.5))
        ok = os.getpid() == pid and not result.ok and shown in result.text
    except BaseException as exc:  # noqa: BLE001 - recorded as not ok
        ok, result = False, exc
    tally.record("agent_tools", case, ok)
    assert ok, result


def _broken(what: str) -> Trajectory | None:
    traj = Trajectory(prompt_ids=[1])
    if what == "not a Trajectory":
        return None
    if what == "lengths":
        traj.response_ids.append(3)
    if what == "a token that is not an id":
        traj.add_sampled([3], None)
        traj.response_ids[0] = "x"
    if what == "over the budget":
        traj.add_sampled(list(range(10)), None)
    return traj


@pytest.mark.parametrize("what", ["not a Trajectory", "lengths", "a token that is not an id", "over the budget"])
def test_an_agent_loop_that_breaks_the_contract_is_named(what):
    try:
        check_trajectory(_broken(what), 4, 0, "agent loop 'mine' (my_pkg.loop:run, from my-agent 1.0)")
        ok, text = False, "accepted"
    except AgentLoopError as exc:
        text = str(exc)
        ok = "agent loop 'mine'" in text and "my-agent 1.0" in text and "trajectory contract" in text
    tally.record("agent_loops", what, ok)
    assert ok, text


# ------------------------------------------------------------ the sandbox without bubblewrap
@pytest.fixture
def fallback(monkeypatch):
    monkeypatch.setenv("RL_CORE_SANDBOX_NO_BWRAP", "1")
    sandbox.containment.cache_clear()
    if sandbox.containment() != "unshare-net":
        sandbox.containment.cache_clear()
        pytest.skip("the fallback sandbox does not work here (no user namespaces)")
    yield
    sandbox.containment.cache_clear()


def _program(code: str) -> str:
    try:
        return sandbox.run_code(code, sandbox.SandboxLimits(wall_s=20, cpu_s=5, tmp_mb=4, max_files=200)).strip()
    except sandbox.SandboxError as exc:
        return f"ERROR {exc}"


SANDBOX = {
    "files into /tmp, /dev/shm, /var/tmp outlive the call": (
        "import os\nfor d in ('/tmp', '/dev/shm', '/var/tmp'):\n    try:\n        open(os.path.join(d, 'MARK'), 'w').close()\n    except OSError:\n        pass",
        lambda out, mark: not any(os.path.exists(os.path.join(d, mark)) for d in ("/tmp", "/dev/shm", "/var/tmp"))),
    "12,000 files into the scratch folder": (
        "for i in range(12000):\n    open(f'f{i}', 'w').close()\nprint('MADE-ALL')", lambda out, mark: "MADE-ALL" not in out and "No space" in out),
    "a host Unix socket": (None, None),
    "another process's /proc/<pid>/cmdline": (
        "import os\nfound = []\nfor p in os.listdir('/proc'):\n    try:\n        found.append(open(f'/proc/{p}/cmdline', 'rb').read())\n    except OSError:\n        pass\n"
        "print((b'api_key=' + b'MARK') in b''.join(found))", lambda out, mark: out.endswith("False")),
}


@pytest.mark.parametrize("case", list(SANDBOX))
def test_the_sandbox_holds_without_bubblewrap(fallback, case):
    mark = f"rlcore-rel-{os.getpid()}"
    code, ok_when = SANDBOX[case]
    holder = srv = None
    if case == "a host Unix socket":
        import socket

        folder = tempfile.mkdtemp(prefix="rlcore-rel-sock-")
        os.chmod(folder, 0o755)
        path = os.path.join(folder, "s")
        srv = socket.socket(socket.AF_UNIX)
        srv.bind(path)
        os.chmod(path, 0o777)
        srv.listen()
        code = f"import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect({path!r})\nprint('CONNECTED')"
        ok_when = lambda out, mark: "CONNECTED" not in out  # noqa: E731
    if "cmdline" in case:
        holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", f"api_key={mark}"])
    try:
        out = _program(code.replace("MARK", mark))
    finally:
        if holder:
            holder.kill()
            holder.wait()
        if srv:
            srv.close()
            os.unlink(path)
            os.rmdir(folder)
    ok = ok_when(out, mark)
    tally.record("agent_sandbox", case, ok)
    assert ok, out


RUN = textwrap.dedent("""
    import os, threading, time
    from rl_core.util.stopping import StopSignals
    from rl_agent.sandbox import SandboxLimits, run_code
    mark = os.environ["RLCORE_REL_MARK"]
    code = f"import os, time\\nif os.fork() == 0:\\n    os.setsid()\\n    os.execv('/bin/sleep', [{mark!r}, '120'])\\ntime.sleep(120)"
    with StopSignals():
        threading.Thread(target=run_code, args=(code, SandboxLimits(wall_s=120, cpu_s=100)), daemon=True).start()
        while True:
            time.sleep(0.1)
""")


@pytest.mark.parametrize("how", ["a second Ctrl-C to the group", "SIGTERM to the group"])
def test_no_tool_process_outlives_rl_core(fallback, how, tmp_path):
    mark = f"rlcore-rel-orphan-{os.getpid()}-{how.split()[0]}"
    script = tmp_path / "run.py"
    script.write_text(RUN)
    proc = subprocess.Popen([sys.executable, str(script)], env={**os.environ, "RLCORE_REL_MARK": mark}, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def alive():
        found = []
        for pid in sandbox._processes():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if mark.encode() in f.read():
                        found.append(pid)
            except OSError:
                pass
        return found

    try:
        deadline = time.monotonic() + 60
        while len(alive()) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        for _ in range(2 if "Ctrl-C" in how else 1):
            os.killpg(proc.pid, signal.SIGINT if "Ctrl-C" in how else signal.SIGTERM)
            time.sleep(0.3)
        proc.wait(timeout=30)
        deadline = time.monotonic() + 30
        while alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        left = alive()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in alive():
            os.kill(pid, signal.SIGKILL)
    tally.record("agent_orphans", how, not left)
    assert not left, left


# ------------------------------------------------------------ rlcore check
def test_check_refuses_what_train_refuses(tmp_path):
    from rl_agent.checks import agent_problems
    from rl_agent.config import MultiTurnConfig
    from rl_core import hookimpl
    from rl_core.cards import Provider, ToolCard
    from rl_core.config.schema import ModelConfig, RunConfig
    from rl_core.config.sections import evolve_key
    from rl_core.plugins import PluginManager

    def undocumented(x: int) -> str:
        return str(x)

    class Cards:
        @staticmethod
        @hookimpl
        def rl_core_register_tools(register):
            register(ToolCard(name="gone_module", factory="no_such_module_rel:tool"))
            register(ToolCard(name="gone_attr", factory="rl_agent.calculator:nope"))
            register(ToolCard(name="no_schema", factory=undocumented))

    pm = PluginManager()
    pm.load_entrypoints()
    pm.register_module(Cards, Provider(distribution="rel", entry_point="rel"))
    reg = pm.build_registry()
    yaml_init = tmp_path / "init.yaml"
    yaml_init.write_text("tools:\n  - class_name: tests.reliability.test_agent_trust.RaisesInInit\n"
                         "    tool_schema: {type: function, function: {name: r, description: x, parameters: {type: object, properties: {}}}}\n")
    cases = {
        "a tool factory whose module is missing": dict(tools=["gone_module"]),
        "a tool factory whose attribute is missing": dict(tools=["gone_attr"]),
        "a tool without a schema": dict(tools=["no_schema"]),
        "a verl tool class whose __init__ raises": dict(tool_config_path=str(yaml_init)),
        "a tool config path that is a folder": dict(tool_config_path=str(tmp_path)),
    }
    failed = []
    for case, mt in cases.items():
        cfg = evolve_key(RunConfig(model=ModelConfig(path="unused")), "rollout.multi_turn", MultiTurnConfig(enable=True, **mt))
        try:
            ok = any(p.severity == "error" and p.key.startswith("rollout.multi_turn.tool") for p in agent_problems(cfg, reg))
        except Exception:  # noqa: BLE001 - check itself crashed: not ok
            ok = False
        tally.record("check_probes", f"agent: {case}", ok)
        if not ok:
            failed.append(case)
    assert not failed, failed


class RaisesInInit:
    def __init__(self, config, tool_schema):
        raise RuntimeError("no endpoint configured")


@pytest.mark.parametrize("case", ["a tool config path that is a folder", "the python tool without any sandbox"])
def test_rlcore_check_refuses_at_the_cli(tmp_path, monkeypatch, case):
    """Through ``rlcore check`` itself (before: the folder crashed check with IsADirectoryError; the python tool
    without bubblewrap was approved with a network namespace only)."""
    from tests.reliability.runs import cli, make_run

    cfg = make_run(tmp_path / "run")
    overrides = ["rollout.multi_turn.enable=true"]
    if case.startswith("a tool config"):
        overrides.append(f"rollout.multi_turn.tool_config_path={tmp_path}")
        shown = "is a folder"
    else:
        monkeypatch.setenv("RL_CORE_SANDBOX_NO_BWRAP", "1")
        monkeypatch.setattr(sandbox, "fallback_command", lambda *a, **k: ["/bin/false"])
        sandbox.containment.cache_clear()
        overrides.append("rollout.multi_turn.tools=[python]")
        shown = "bubblewrap"
    try:
        code, out, err = cli("check", str(cfg), *overrides)
    finally:
        sandbox.containment.cache_clear()
    text = out + err
    ok = code != 0 and shown in text and "Traceback" not in text
    tally.record("check_probes", f"agent, rlcore check: {case}", ok)
    assert ok, (code, text[-2000:])
