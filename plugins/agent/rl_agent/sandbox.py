"""The built-in ``python`` tool: model-written code run in a contained, killed-on-timeout process.

Every run gets (see ``docs/reliability.md``, "The python tool's sandbox", for
what this does and does not contain):

- a fresh process group (``start_new_session``) killed as a whole (``SIGKILL``)
  at the wall-clock limit, and a CPU-time limit (``RLIMIT_CPU``);
- an address-space limit (``RLIMIT_AS``: a 10 GiB allocation fails with ``MemoryError``);
- at most :attr:`SandboxLimits.max_processes` processes of its own (``RLIMIT_NPROC``,
  which the kernel counts per user and never applies to root): when rl-core runs
  as root each run gets a user of its own, a uid from :data:`RUN_UIDS` that no
  process has, so concurrent runs, and the exited processes of earlier runs that
  the system has not reaped yet, do not share one budget (``nobody`` when those
  uids are not mapped here); otherwise the limit is the processes its user already
  has plus ``max_processes``. A start refused by that limit is an error that names it;
- output capped at :attr:`SandboxLimits.output_bytes` (``RLIMIT_FSIZE`` on the
  capture file: writing more kills the process);
- an empty working directory and a scrubbed environment (``PATH``, ``HOME``,
  ``LANG`` only; ``python -I`` ignores ``PYTHON*`` variables and the user site);
- with `bubblewrap <https://github.com/containers/bubblewrap>`_ (``bwrap``) on
  ``PATH`` and working: new user, pid, network, IPC and UTS namespaces, the
  whole filesystem read-only, a private size-limited ``/tmp`` as the working
  directory and ``/dev/shm``, the caller's home hidden, a private ``/proc``;
  without it (or with ``RL_CORE_SANDBOX_NO_BWRAP=1``), ``unshare``'s user, mount,
  network and PID namespaces set up by :mod:`rl_agent.sandbox_ns` (the same: the
  filesystem read-only, private capped ``/tmp`` and ``/dev/shm``, empty ``/var/tmp``
  and ``/run``, its own ``/proc``, no capabilities); in both, a seccomp filter
  refuses Unix-domain sockets (a host's sockets stay out of reach). Where neither
  works, :func:`containment` says ``"rlimits"``: the tool refuses to run
  (:func:`refusal`), and ``rlcore check`` refuses a run that names it;
- ``SIGKILL`` to the first process when the rl-core thread that started it ends
  (``PR_SET_PDEATHSIG``): no program outlives rl-core (a second Ctrl-C, ``SIGTERM``
  to its process group, ``kill -9``). The tool's result starts with nothing
  about its containment (the model sees only its program's output).

The result is the program's stdout (then stderr, marked), or an error the
model sees: ``Error: ... timed out``, ``... killed (out of memory / CPU
time / output limit)``, the exit status. An error is raised as
:class:`SandboxError` so the tool call counts as a tool error.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import attrs

from rl_agent.sandbox_ns import fallback_command, seccomp_filter, set_parent_death_signal

NOBODY = 65534
# users for the runs of a root rl-core, one per run: 65536 uids in the range systemd leaves unassigned
# (0x70000000-0x7ffdffff, below its "foreign" range; systemd.io/UIDS-GIDS), which no account or container range has
RUN_UIDS = range(0x7FFE0000 - 0x10000, 0x7FFE0000)

log = logging.getLogger(__name__)


class SandboxError(RuntimeError):
    """The sandboxed program failed (timeout, a limit, a non-zero exit); the message is what the model sees."""


@attrs.frozen(kw_only=True)
class SandboxLimits:
    cpu_s: int = 5
    wall_s: float = 10.0
    memory_mb: int = 1024
    output_bytes: int = 16_384
    max_processes: int = 32
    tmp_mb: int = 64
    max_files: int = 2048  # files and folders in the private /tmp (and, apart, in /dev/shm)


def _works(cmd: list[str]) -> bool:
    try:
        return subprocess.run(cmd, capture_output=True, timeout=10, preexec_fn=_drop_privileges).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@functools.lru_cache(maxsize=1)
def containment() -> str:
    """``"bwrap"`` (bubblewrap's namespaces), ``"unshare-net"`` (the same made by ``unshare``, :mod:`rl_agent.sandbox_ns`;
    the name is kept from when it was a network namespace only) or ``"rlimits"`` (neither works: the tool refuses).
    ``RL_CORE_SANDBOX_NO_BWRAP=1`` skips bubblewrap."""
    if os.environ.get("RL_CORE_SANDBOX_NO_BWRAP") != "1" and shutil.which("bwrap"):
        if _works(_bwrap_prefix(64) + ["true"]):
            return "bwrap"
    fallback = fallback_command(interpreter(), [interpreter(), "-I", "-c", "pass"], tmp_mb=1, max_files=64)
    if fallback and _works(fallback):
        return "unshare-net"
    return "rlimits"


def refusal() -> str | None:
    """Why the python tool cannot run here (no containment it would accept), or None."""
    if containment() != "rlimits":
        return None
    return ("the python tool needs a sandbox and none works here: bubblewrap (bwrap) is not installed or does not work, and the "
            "fallback (unshare's user, mount, network and PID namespaces, setpriv, a seccomp filter) failed. Install bubblewrap "
            "(apt-get install bubblewrap / dnf install bubblewrap) or allow unprivileged user namespaces")


def _bwrap_prefix(tmp_mb: int, max_files: int = 2048, seccomp_fd: int | None = None) -> list[str]:
    # by full path: the program's scrubbed PATH need not hold the folder bwrap was found in
    cmd = [shutil.which("bwrap") or "bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-all", "--die-with-parent", "--new-session"]
    home = os.path.expanduser("~")
    exe = os.path.realpath(interpreter())
    if home not in ("/", "") and os.path.isdir(home) and not exe.startswith(home.rstrip("/") + "/"):
        cmd += ["--tmpfs", home]
    size = str(tmp_mb * 1024 * 1024)
    cmd += ["--size", size, "--tmpfs", "/tmp", "--size", size, "--tmpfs", "/dev/shm", "--chdir", "/tmp"]
    if seccomp_fd is not None:
        cmd += ["--seccomp", str(seccomp_fd)]
    return cmd


def _world_executable(path: str) -> bool:
    """Whether a user with no rights of its own (``nobody``) can run ``path`` (every folder above it searchable)."""
    path = os.path.realpath(path)
    try:
        if not os.stat(path).st_mode & 0o001:
            return False
        parent = os.path.dirname(path)
        while True:
            if not os.stat(parent).st_mode & 0o001:
                return False
            if parent == "/":
                return True
            parent = os.path.dirname(parent)
    except OSError:
        return False


@functools.lru_cache(maxsize=1)
def interpreter() -> str:
    """The Python that runs sandboxed code: this one, unless the ``nobody`` user cannot run it (e.g. under /root)."""
    if os.geteuid() != 0 or _world_executable(sys.executable):
        return sys.executable
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.path.exists(candidate) and _world_executable(candidate):
            return candidate
    return sys.executable


def _drop_privileges(uid: int = NOBODY) -> None:
    if os.geteuid() == 0:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)


def _mapped(ids: range) -> bool:
    """Whether every uid and gid in ``ids`` exists in this user namespace (a container may map only 65536)."""
    for name in ("uid_map", "gid_map"):
        try:
            with open(f"/proc/self/{name}") as f:
                spans = [tuple(map(int, line.split()[:3])) for line in f if line.strip()]
        except OSError:
            return False
        if not any(inside <= ids.start and ids.stop <= inside + count for inside, _, count in spans):
            return False
    return True


def _uid_and_threads(pid: int | str) -> tuple[int, int] | None:
    """A process's real uid and thread count (``/proc/<pid>/status``), or None once it is gone."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            status = f.read()
        return int(status.split(b"\nUid:", 1)[1].split(None, 1)[0]), int(status.split(b"\nThreads:", 1)[1].split(None, 1)[0])
    except (OSError, IndexError, ValueError):
        return None


def _tasks_by_uid() -> dict[int, int]:
    """Real uid -> how many tasks (threads included, zombies too: what ``RLIMIT_NPROC`` counts) it has in /proc."""
    out: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (found := _uid_and_threads(entry)):
            out[found[0]] = out.get(found[0], 0) + found[1]
    return out


_CLAIMED: set[int] = set()
_CLAIM_LOCK = threading.Lock()


@contextlib.contextmanager
def _run_user():
    """``(uid, own)``: the user a run's program runs as, and whether that user is the run's own.

    As root: a uid from :data:`RUN_UIDS` that no process has and no other run of this process holds (``own``);
    ``nobody`` where those uids are not mapped. Otherwise rl-core's own user (the program cannot change it)."""
    if os.geteuid() != 0:
        yield os.getuid(), False
        return
    if not _mapped(RUN_UIDS):
        yield NOBODY, False
        return
    busy = _tasks_by_uid()
    with _CLAIM_LOCK:
        uid = next(u for u in iter(lambda: random.choice(RUN_UIDS), None) if u not in busy and u not in _CLAIMED)
        _CLAIMED.add(uid)
    try:
        yield uid, True
    finally:
        with _CLAIM_LOCK:
            _CLAIMED.discard(uid)


def _child_setup(limits: SandboxLimits, uid: int, nproc: int):
    parent = os.getpid()

    def setup():
        mem = limits.memory_mb * 1024 * 1024
        # soft < hard: the kernel sends SIGXCPU at the soft limit (reported as a CPU-time error); with
        # soft == hard it sends SIGKILL straight away and the model would only see "killed by signal 9"
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s + 1))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.output_bytes, limits.output_bytes))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        _drop_privileges(uid)
        set_parent_death_signal()  # after the change of user, which clears it
        if os.getppid() != parent:  # rl-core ended before the line above (a race under load): nothing would signal us
            os._exit(137)
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
        # bwrap itself maps memory before it execs the program: the address-space cap applies to the
        # program as well (it is inherited), sized so bwrap's own setup still fits
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))

    return setup


def _processes() -> dict[int, tuple[int, int, int]]:
    """pid -> (parent pid, process group, session) of every process visible in /proc."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if fields[0] == b"Z":  # a zombie holds nothing; its parent or init reaps it
            continue
        out[int(entry)] = (int(fields[1]), int(fields[2]), int(fields[3]))
    return out


def _tree(root: int) -> set[int]:
    """``root``, its descendants, and every process in its process group or session (orphans included)."""
    procs = _processes()
    found = {pid for pid, (_, pgid, sid) in procs.items() if pgid == root or sid == root} | {root}
    changed = True
    while changed:
        changed = False
        for pid, (ppid, pgid, sid) in procs.items():
            if pid not in found and (ppid in found or sid in found or pgid in found):
                found.add(pid)
                changed = True
    return found


def _kill_group(proc: subprocess.Popen, own_uid: int | None = None) -> int:
    """SIGKILL the program's whole tree (bwrap's namespace goes with its init) and, given the run's own uid, every
    process of that user (a daemon that left the tree and its session); returns how many were still alive after 5 s."""
    for _ in range(3):
        pids = _tree(proc.pid)
        if own_uid is not None:
            pids |= {pid for pid, uid in _owners().items() if uid == own_uid}
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        deadline = time.monotonic() + 5
        alive = pids
        while alive and time.monotonic() < deadline:
            current = _processes()
            alive = {p for p in alive if p in current}
            if alive:
                time.sleep(0.02)
        if not alive and not (_tree(proc.pid) - {proc.pid}) and not (own_uid is not None and own_uid in _owners().values()):
            return 0
    return len(alive)


def _owners() -> dict[int, int]:
    """pid -> real uid of every live process visible in /proc (zombies left out, as in :func:`_processes`)."""
    return {pid: found[0] for pid in _processes() if (found := _uid_and_threads(pid))}


def run_code(code: str, limits: SandboxLimits = SandboxLimits()) -> str:
    """Run Python ``code`` under ``limits``; its output, or :class:`SandboxError` with what the model should see."""
    if not isinstance(code, str):
        raise SandboxError(f"code must be a string, got {type(code).__name__}")
    mode = containment()
    if (refused := refusal()) is not None:
        raise SandboxError(refused)
    sweep_stale()
    host_dir = tempfile.mkdtemp(prefix=f"rlcore-sandbox-{os.getpid()}-")
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, host_dir, ignore_errors=True)
        uid, own = stack.enter_context(_run_user())
        # RLIMIT_NPROC counts every task of the user: those it already has (none for a run's own user) + the budget
        had = 0 if own else _tasks_by_uid().get(uid, 0)
        nproc = had + limits.max_processes
        hard = resource.getrlimit(resource.RLIMIT_NPROC)[1]
        if hard != resource.RLIM_INFINITY and os.geteuid() != 0:
            nproc = min(nproc, hard)  # a user cannot raise its hard limit
        work = os.path.join(host_dir, "work")
        os.mkdir(work)
        if os.geteuid() == 0:
            os.chown(work, uid, uid)
        out_path, err_path = os.path.join(host_dir, "stdout"), os.path.join(host_dir, "stderr")
        python = [interpreter(), "-I", "-c", code]
        pass_fds: tuple[int, ...] = ()
        if mode == "bwrap":
            cmd = _bwrap_prefix(limits.tmp_mb, limits.max_files)
            if (prog := seccomp_filter()) is not None:
                with open(os.path.join(host_dir, "seccomp.bpf"), "wb") as f:
                    f.write(prog)
                fd = stack.enter_context(open(os.path.join(host_dir, "seccomp.bpf"), "rb")).fileno()
                cmd, pass_fds = _bwrap_prefix(limits.tmp_mb, limits.max_files, fd), (fd,)
            cmd += python
        else:
            cmd = fallback_command(interpreter(), python, tmp_mb=limits.tmp_mb, max_files=limits.max_files)
            if cmd is None:
                raise SandboxError("the sandbox's fallback needs unshare and setpriv (util-linux); install bubblewrap")
        cwd = work
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}
        start = time.monotonic()
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            try:
                proc = subprocess.Popen(
                    cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                    start_new_session=True, preexec_fn=_child_setup(limits, uid, nproc), close_fds=True, pass_fds=pass_fds,
                )
            except BlockingIOError:  # exec refused: the user was over RLIMIT_NPROC when the child became it
                raise _process_limit_error(uid, had, nproc, limits) from None
            try:
                proc.wait(timeout=limits.wall_s)
                timed_out = False
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                _kill_group(proc, uid if own else None)  # also whatever the program started and left running
        elapsed = time.monotonic() - start
        stdout = _read(out_path, limits.output_bytes)
        stderr = _read(err_path, limits.output_bytes)
    rc = proc.returncode
    if mode == "bwrap" and rc == 1 and _bwrap_could_not_fork(stderr):
        raise _process_limit_error(uid, had, nproc, limits)
    if timed_out:
        raise SandboxError(f"the program timed out after {limits.wall_s:g} s (wall clock) and was killed")
    if rc in (-signal.SIGXCPU, 128 + signal.SIGXCPU):
        raise SandboxError(f"the program used more than {limits.cpu_s} s of CPU time and was killed")
    if rc in (-signal.SIGXFSZ, 128 + signal.SIGXFSZ):
        raise SandboxError(f"the program printed more than {limits.output_bytes} bytes and was stopped; output so far:\n{stdout[-500:]}")
    if rc in (-signal.SIGKILL, 128 + signal.SIGKILL) and not stderr.strip():
        raise SandboxError(
            f"the program was killed (SIGKILL) after {elapsed:.1f} s: it reached the sandbox's CPU-time "
            f"({limits.cpu_s} s) or memory ({limits.memory_mb} MB) limit"
        )
    if rc != 0:
        tail = stderr.strip().splitlines()[-3:] if stderr.strip() else []
        why = "; ".join(tail) or (f"killed by signal {-rc}" if rc < 0 else f"exit status {rc}")
        raise SandboxError(f"the program failed: {why}")
    return stdout + (f"\n[stderr]\n{stderr}" if stderr.strip() else "")


def sweep_stale() -> None:
    """Remove the host folders (captured output) of runs whose rl-core process is gone (killed before it could)."""
    root = tempfile.gettempdir()
    try:
        names = os.listdir(root)
    except OSError:
        return
    for name in names:
        parts = name.split("-")
        if len(parts) < 4 or not name.startswith("rlcore-sandbox-") or not parts[2].isdigit():
            continue
        try:
            os.kill(int(parts[2]), 0)
        except ProcessLookupError:
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
        except (PermissionError, OverflowError):
            pass


def _bwrap_could_not_fork(stderr: str) -> bool:
    """bwrap's own start failed for want of processes (``bwrap: Creating new namespace failed: Resource ...``)."""
    first = stderr.lstrip().partition("\n")[0]
    return first.startswith("bwrap: ") and first.endswith(os.strerror(errno.EAGAIN))


def _process_limit_error(uid: int, had: int, nproc: int, limits: SandboxLimits) -> SandboxError:
    message = (
        f"the sandbox could not start the program: its user (uid {uid}) reached the process limit (RLIMIT_NPROC "
        f"{nproc}: the {had} tasks that user had before it started + SandboxLimits.max_processes "
        f"{limits.max_processes}; it has {_tasks_by_uid().get(uid, 0)} now). Raise SandboxLimits.max_processes, "
        f"or run fewer programs as that user at once"
    )
    log.warning("python tool: %s", message)
    return SandboxError(message)


def _read(path: str, limit: int) -> str:
    with open(path, "rb") as f:
        return f.read(limit).decode("utf-8", errors="replace")


def python(code: str) -> str:
    """Run a Python program and return what it prints. Use print() to show results.

    Args:
        code: the Python source to run (standard library only; no network, no files outside its working directory)
    """
    return run_code(code)
