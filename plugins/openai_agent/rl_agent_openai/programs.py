"""Agent programs: one process per trajectory, started with the endpoint's address, token and task, and limited.

Each run is a fresh process (``callable``: ``python -m rl_agent_openai.child`` importing the function; ``command``:
the argv as given) in a new session and process group, in an empty working directory of its own, with:

- the environment scrubbed to ``PATH``, ``HOME``, ``LANG`` (+ ``PYTHONPATH`` with the run's working directory for
  ``callable``) plus ``OPENAI_BASE_URL`` (the session's base URL), ``OPENAI_API_KEY`` (the rollout call's token),
  ``RL_AGENT_SESSION``, ``RL_AGENT_TASK_FILE`` (JSON: ``messages``, ``extra_info`` without the reward's ground
  truth, ``index``), ``RL_AGENT_RESULT_FILE`` (where the program may write its result as JSON) and ``env``;
- a wall-clock limit (``timeout_s``: then the whole group, and every process still in its session, is killed with
  SIGKILL), ``RLIMIT_CPU`` (``cpu_s``), ``RLIMIT_AS`` (``memory_mb``), and its stdout + stderr in one file capped
  by ``RLIMIT_FSIZE`` (``max_output_bytes``: writing more kills it);
- on exit, anything it left running in its session is killed too: no process outlives the rollout call.

Unlike the ``python`` tool's sandbox (rl_agent.sandbox) there is no network namespace: the program must reach the
endpoint on loopback. It runs as the trainer's user: run only programs you trust as much as your reward code.

A run ends ``ok`` (exit 0), ``crash`` (another exit status or a signal), ``timeout``, ``output_limit`` or
``too_many_calls``; any but ``ok`` scores ``failure_reward``. Its result: the callable's return value, or the JSON
of the result file (a number is the reward; an object's ``reward`` key is, the rest is kept in
``extra_info["agent"]["result"]``); no reward: the run's reward function scores the final state.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import attrs

from rl_agent_openai.options import ProgramOptions

#: extra_info keys never handed to the program (what the reward is computed from)
HIDDEN_KEYS = ("reward_model", "ground_truth", "answer", "tools_kwargs")


@attrs.define
class Run:
    index: int
    sid: str
    task: dict
    proc: subprocess.Popen | None = None
    folder: str | None = None
    started: float = 0.0
    seconds: float = 0.0
    status: str = "pending"  # pending, running, ok, crash, timeout, output_limit, too_many_calls, start_failed
    returncode: int | None = None
    result: Any = None
    log_tail: str = ""
    stop_reason: str | None = None  # set from outside (a flood): kill at the next poll

    @property
    def failed(self) -> bool:
        return self.status not in ("ok",)


def _limit(pid: int, opts: ProgramOptions) -> None:
    """The program's rlimits, set on it right after it starts (``prlimit``: no code runs between fork and exec,
    which is not safe in this multi-threaded process); its children inherit them."""
    limits = [(resource.RLIMIT_FSIZE, (int(opts.max_output_bytes),) * 2), (resource.RLIMIT_CORE, (0, 0))]
    if opts.memory_mb:
        limits.append((resource.RLIMIT_AS, (int(opts.memory_mb) * 1024 * 1024,) * 2))
    if opts.cpu_s:
        limits.append((resource.RLIMIT_CPU, (int(max(1, opts.cpu_s)), int(max(1, opts.cpu_s)) + 1)))
    for which, value in limits:
        resource.prlimit(pid, which, value)


def _session_members(sid: int) -> list[int]:
    """Every process whose session id is ``sid`` (a program's children, even those that left its process group)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 3 and fields[3] == str(sid) and fields[0] != "Z":
            out.append(int(entry))
    return out


def kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL the program's process group and every process left in its session; reap the program."""
    for _ in range(3):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        members = _session_members(proc.pid)
        for pid in members:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if not members:
            break
        time.sleep(0.01)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def visible_task(index: int, messages: list, extra_info: dict) -> dict:
    info = {k: v for k, v in (extra_info or {}).items() if k not in HIDDEN_KEYS}
    return {"index": index, "messages": messages, "extra_info": _jsonable(info)}


def _jsonable(value: Any) -> Any:
    try:
        return json.loads(json.dumps(value, default=lambda o: o.tolist() if hasattr(o, "tolist") else str(o)))
    except (TypeError, ValueError):
        return str(value)


class Programs:
    """The agent programs of one rollout call: started (at most ``max_concurrent`` at once), watched, reaped."""

    def __init__(self, opts: ProgramOptions, runs: list[Run], base_url: str, token: str) -> None:
        self.opts, self.runs, self.base_url, self.token = opts, runs, base_url, token
        self.lock = threading.Lock()
        self._next = 0
        self._running: list[Run] = []
        self.root = tempfile.mkdtemp(prefix="rl-core-agents-")

    # -- starting ---------------------------------------------------------------------------------------------------
    def _argv(self) -> list[str]:
        if self.opts.callable is not None:
            return [sys.executable, "-m", "rl_agent_openai.child", self.opts.callable]
        return list(self.opts.command)

    def _env(self, run: Run, folder: str) -> dict[str, str]:
        env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG") if k in os.environ}
        if self.opts.callable is not None:
            env["PYTHONPATH"] = os.pathsep.join([os.getcwd()] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
            env["RL_AGENT_CWD"] = os.getcwd()
        env.update(self.opts.env)
        env.update({
            "OPENAI_BASE_URL": f"{self.base_url}/s/{run.sid}/v1",
            "OPENAI_API_KEY": self.token,
            "RL_AGENT_SESSION": run.sid,
            "RL_AGENT_TASK_FILE": os.path.join(folder, "task.json"),
            "RL_AGENT_RESULT_FILE": os.path.join(folder, "result.json"),
        })
        return env

    def _start(self, run: Run) -> None:
        folder = tempfile.mkdtemp(prefix=f"run{run.index}-", dir=self.root)
        run.folder = folder
        Path(folder, "task.json").write_text(json.dumps(run.task), encoding="utf-8")
        work = os.path.join(folder, "work")
        os.mkdir(work)
        log = open(os.path.join(folder, "output.log"), "wb")
        try:
            run.proc = subprocess.Popen(self._argv(), cwd=work, env=self._env(run, folder), stdin=subprocess.DEVNULL, stdout=log,
                                        stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)
        except OSError as exc:
            run.status, run.log_tail = "start_failed", f"{type(exc).__name__}: {exc}"
            return
        finally:
            log.close()
        try:
            _limit(run.proc.pid, self.opts)
        except OSError as exc:  # the limits cannot be set: never run it unlimited (unless it has ended already)
            if run.proc.poll() is None:
                kill_tree(run.proc)
                run.status, run.log_tail = "start_failed", f"the limits could not be set: {type(exc).__name__}: {exc}"
                return
        run.started = time.monotonic()
        run.status = "running"
        self._running.append(run)

    def _fill(self) -> None:
        cap = self.opts.max_concurrent or len(self.runs)
        while self._next < len(self.runs) and len(self._running) < cap:
            run = self.runs[self._next]
            self._next += 1
            self._start(run)

    # -- watching ---------------------------------------------------------------------------------------------------
    def live(self) -> int:
        with self.lock:
            return len(self._running)

    def done(self) -> bool:
        with self.lock:
            return self._next >= len(self.runs) and not self._running

    def poll(self) -> None:
        """Reap finished programs, kill those past their limits, start waiting ones."""
        with self.lock:
            now = time.monotonic()
            for run in list(self._running):
                code = run.proc.poll()
                if code is None and run.stop_reason is None and now - run.started <= self.opts.timeout_s:
                    continue
                if code is None:
                    run.status = run.stop_reason or "timeout"
                elif code == 0:
                    run.status = "ok"
                elif code == -signal.SIGXFSZ or self._output_full(run):  # Python ignores SIGXFSZ: its write fails instead
                    run.status = "output_limit"
                else:
                    run.status = run.stop_reason or "crash"
                kill_tree(run.proc)  # what it left behind in its session, too
                run.returncode = run.proc.returncode
                run.seconds = now - run.started
                self._finish(run)
                self._running.remove(run)
            self._fill()

    def _output_full(self, run: Run) -> bool:
        try:
            return os.path.getsize(os.path.join(run.folder, "output.log")) >= self.opts.max_output_bytes
        except OSError:
            return False

    def stop(self, run: Run, reason: str) -> None:
        run.stop_reason = reason

    def _finish(self, run: Run) -> None:
        log = os.path.join(run.folder, "output.log")
        try:
            with open(log, "rb") as f:
                f.seek(max(0, os.path.getsize(log) - 2000))
                run.log_tail = f.read().decode(errors="replace").replace(self.token, "<token>")  # never kept in the batch
        except OSError:
            run.log_tail = ""
        if run.status != "ok":
            return
        path = os.path.join(run.folder, "result.json")
        if os.path.exists(path):
            try:
                if os.path.getsize(path) > 1_000_000:
                    raise ValueError("the result file is over 1 MB")
                run.result = json.loads(Path(path).read_text(encoding="utf-8"))
            except (ValueError, OSError) as exc:
                run.status, run.log_tail = "crash", f"the result file is not JSON: {exc}\n" + run.log_tail

    def close(self) -> None:
        """Kill every program still running (the rollout is over) and remove the working folders."""
        with self.lock:
            for run in self._running:
                run.status = run.stop_reason or "timeout"
                kill_tree(run.proc)
                run.returncode = run.proc.returncode
                run.seconds = time.monotonic() - run.started
                self._finish(run)
            self._running.clear()
        shutil.rmtree(self.root, ignore_errors=True)


def reward_of(run: Run, failure_reward: float) -> tuple[float | None, Any]:
    """(the reward, the rest of the result) of a finished run: a failure scores ``failure_reward``."""
    if run.failed:
        return float(failure_reward), run.result
    res = run.result
    if isinstance(res, bool):
        return None, res
    if isinstance(res, (int, float)):
        return float(res), None
    if isinstance(res, dict) and isinstance(res.get("reward"), (int, float)) and not isinstance(res.get("reward"), bool):
        return float(res["reward"]), {k: v for k, v in res.items() if k != "reward"}
    return None, res
