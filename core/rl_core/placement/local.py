"""The ``local`` placement: :class:`LocalCluster` runs one :class:`~rl_core.placement.worker.HybridWorker` per rank on
this machine, in the controller's process for one rank, else in spawned processes joined by ``torch.distributed``.

Rendezvous opens nothing to the network: a FileStore in a private temporary folder (a TCPStore master would listen on
every interface), gloo / NCCL bound to the loopback interface unless ``GLOO_SOCKET_IFNAME`` / ``NCCL_SOCKET_IFNAME``
are set. A worker that raises sends its traceback back; one that dies (OOM killer, segfault) is named with its exit
code within a second, instead of leaving the controller waiting forever.
"""

from __future__ import annotations

import atexit
import multiprocessing as mp
import os
import shutil
import signal
import tempfile
import traceback
from typing import Any, Sequence

from rl_core.backends import WorkerContext
from rl_core.placement.rendezvous import loopback_interface  # noqa: F401 - re-exported
from rl_core.placement.contract import Done, Pending, WorkerError, WorkerMethod, after_a_death, dispatch, per_rank
from rl_core.placement.listeners import descendants
from rl_core.problems import UserError
from rl_core.util import stack_dump
from rl_core.util.console import usable_cores
from rl_core.util.stopping import ignore_stop_signals

__all__ = ["LocalCluster", "WorkerError", "after_a_death", "local_rendezvous_env", "loopback_interface"]


def _kill_with_its_children(proc) -> None:
    """Kill a worker and every process below it (its engine's processes would keep running as orphans, holding the
    output pipe and memory); the tree is read before the kill, as an orphan is re-parented."""
    below = descendants(proc.pid)[1:] if proc.pid is not None else []
    proc.kill()
    proc.join(5)
    for pid in below:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _kill_at_exit(procs: list) -> None:
    """At interpreter exit: kill the workers of a cluster that was never closed (see LocalCluster's start)."""
    for proc in procs:
        if proc.is_alive():
            _kill_with_its_children(proc)


def _killed_by(code: int | None) -> str:
    """Why a worker that ended with ``code`` ended, when a signal did it (multiprocessing: exit code -signal)."""
    if not code or code >= 0:
        return ""
    if code == -signal.SIGKILL:
        return " (SIGKILL: often the OOM killer; lower micro-batch sizes)"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    return f" (killed by {name})"


def _end_own_children(grace_s: float = 2.0) -> None:
    """End the processes this worker started and left running (an engine's scheduler): multiprocessing joins them at
    exit, so one that never ends would hang this worker and the controller. One that inherited the ignored SIGTERM
    is killed after ``grace_s``."""
    import multiprocessing

    children = multiprocessing.active_children()
    for child in children:
        child.terminate()
    for child in children:
        child.join(grace_s)
        if child.is_alive():
            child.kill()
            child.join(grace_s)


def local_rendezvous_env() -> dict[str, str]:
    """Environment for the worker processes: collective libraries bind to the loopback interface only."""
    lo = loopback_interface()
    return {k: os.environ.get(k, lo) for k in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")}


def _device_for(device: str, local_rank: int) -> str:
    return f"cuda:{local_rank}" if device == "cuda" else "cpu"


def _is_disk_or_permission_error(exc: BaseException) -> bool:
    """A full disk or a folder the user cannot write: their environment, not our bug (no traceback)."""
    import errno

    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EROFS, errno.EFBIG)


def _describe(exc: BaseException) -> str:
    """A user error's message alone; anything else with the worker's traceback."""
    if isinstance(exc, UserError) or _is_disk_or_permission_error(exc):
        return f"{type(exc).__name__}: {exc}"
    return f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"


def _worker_main(conn, stack, context: WorkerContext, store_file: str, threads: int | None, env: dict[str, str], roles: tuple[str, ...] | None = None) -> None:
    ignore_stop_signals()  # a terminal's Ctrl-C reaches every worker too: the controller stops them (no tracebacks)
    stack_dump.install()  # `kill -USR1 <worker pid>`: its stacks, as in the controller
    os.environ.update(env)
    import torch
    import torch.distributed as dist

    if threads:
        torch.set_num_threads(threads)
    try:
        if context.device.startswith("cuda"):
            torch.cuda.set_device(context.torch_device)
        if context.world_size > 1:  # a single worker (a role's own pool of one) runs unsharded, as in-process
            dist.init_process_group(
                "nccl" if context.device.startswith("cuda") else "gloo",
                init_method=f"file://{store_file}",
                rank=context.rank,
                world_size=context.world_size,
                # the group's device, so barriers do not have to guess it (and warn)
                device_id=context.torch_device if context.device.startswith("cuda") else None,
            )
        from rl_core.placement.worker import HybridWorker

        worker = HybridWorker(stack, context, roles)
        conn.send(("ok", None))
    except BaseException as exc:  # noqa: BLE001
        message = _describe(exc)
        # first: an engine started before the failure (SGLang's scheduler) would hold this exit forever, and once the
        # controller has the error it may kill this worker before its children are ended
        _end_own_children()
        conn.send(("error", message))
        return
    try:
        _serve(conn, worker)
    finally:
        _end_own_children()


def _serve(conn, worker) -> None:
    import torch.distributed as dist

    while True:
        try:
            method, args = conn.recv()
        except EOFError:
            break
        if method == "__stop__":
            try:
                worker.shutdown()
                if dist.is_initialized():
                    dist.destroy_process_group()
            finally:
                conn.send(("ok", None))
            break
        try:
            conn.send(("ok", dispatch(worker, method, args)))
        except BaseException as exc:  # noqa: BLE001
            conn.send(("error", _describe(exc)))


class LocalCluster:
    """One worker per rank on this machine (in-process for a single rank). ``roles`` / ``world_size`` /
    ``first_device``: a pool of its own (:mod:`rl_core.placement.pools`) on the GPUs from ``cuda:first_device`` on;
    ``processes``: how many worker processes share this machine's cores in all."""

    def __init__(
        self, stack, *, spawn: bool | None = None, roles: tuple[str, ...] | None = None, world_size: int | None = None,
        first_device: int = 0, processes: int | None = None,
    ) -> None:
        config = stack.config
        self.world_size = stack.sizes.world_size if world_size is None else world_size
        self.device = stack.sizes.device
        self.stack = stack
        self.roles = roles
        spawn = self.world_size > 1 if spawn is None else spawn
        if self.world_size > 1 and not spawn:
            raise ValueError("several ranks need spawned processes")
        threads = config.trainer.torch_threads
        processes = processes or self.world_size
        if threads is None and self.device == "cpu" and processes > 1:
            threads = max(1, usable_cores() // processes)  # the cores this process may run on (taskset, cgroups' cpusets)
        self._in_flight: Pending | None = None
        self._procs: list[mp.Process] = []
        self._conns: list[Any] = []
        self._local = None
        self._store_dir: str | None = None
        contexts = [
            WorkerContext(
                rank=r, world_size=self.world_size, local_rank=first_device + r, device=_device_for(self.device, first_device + r), seed=config.trainer.seed
            )
            for r in range(self.world_size)
        ]
        if not spawn:
            import torch

            from rl_core.placement.worker import HybridWorker

            if threads:
                torch.set_num_threads(threads)
            if self.device == "cuda":
                torch.cuda.set_device(0)
            self._local = HybridWorker(stack, contexts[0], roles)
            return
        ctx = mp.get_context("spawn")
        self._store_dir = tempfile.mkdtemp(prefix="rl-core-rendezvous-")  # 0700: only this user
        store_file = os.path.join(self._store_dir, "store")
        env = local_rendezvous_env()
        # Not daemonic: a worker's engine may start processes of its own (SGLang's scheduler does, and a daemonic
        # process may not have children). So that an interpreter exit without close() cannot wait on them forever
        # (multiprocessing joins non-daemonic children at exit), an exit hook registered after multiprocessing's
        # own, hence run before it, kills whatever is still alive.
        for context in contexts:
            parent, child = ctx.Pipe()
            name = f"rl-core-{'-'.join(roles)}-{context.rank}" if roles else f"rl-core-worker-{context.rank}"
            proc = ctx.Process(target=_worker_main, args=(child, stack, context, store_file, threads, env, roles), daemon=False, name=name)
            proc.start()
            self._procs.append(proc)
            self._conns.append(parent)
        atexit.register(_kill_at_exit, list(self._procs))  # the process objects, not the cluster: it may never be assigned
        try:
            self._gather("start")
        except BaseException:
            # the ranks that started must not outlive the failed start (nothing else holds them): stopped as at the end
            # of a run, so their engines shut down (a rank waiting in a collective was already killed by _gather)
            self.close()
            raise

    # ------------------------------------------------------------------ calls
    def submit(self, method: WorkerMethod, per_rank_args: Sequence[tuple] | None = None, *, same_args: tuple = ()) -> Pending:
        """Send ``method`` to every rank (``per_rank_args[r]`` or ``same_args`` for all); gather with ``.result()``.
        In-process the call runs here and now."""
        method = WorkerMethod.named(method)
        args = per_rank(method, self.world_size, per_rank_args, same_args)
        if self._local is not None:
            return Done(lambda: [dispatch(self._local, method, args[0])])
        if self._in_flight is not None and self._in_flight.waiting:
            raise RuntimeError(f"{self._who}{method.value}: a call is still in flight on these workers: gather it (.result()) first")
        if not self._procs:
            raise WorkerError(f"{self._who}{method.value}: the workers were stopped (an earlier failure, or close())")
        for conn, a in zip(self._conns, args):
            try:
                conn.send((method.value, a))
            except (BrokenPipeError, ConnectionResetError):  # a dead worker: _gather names it with its exit code
                pass
        self._in_flight = Pending(lambda: self._gather(method.value))
        return self._in_flight

    def call(self, method: WorkerMethod, per_rank_args: Sequence[tuple] | None = None, *, same_args: tuple = ()) -> list[Any]:
        """Call ``method`` on every rank; ``per_rank_args[r]`` or ``same_args`` for all. One result per rank."""
        return self.submit(method, per_rank_args, same_args=same_args).result()

    def _gather(self, method: str) -> list[Any]:
        results: list[Any] = [None] * len(self._conns)
        pending = set(range(len(self._conns)))
        errors: list[str] = []
        while pending:
            for rank in sorted(pending):
                conn, proc = self._conns[rank], self._procs[rank]
                if conn.poll(0.2):
                    try:
                        status, value = conn.recv()
                    except (EOFError, ConnectionResetError, BrokenPipeError):  # died while its answer was on the way
                        proc.join(5)  # (tensors travel as shared memory fetched from the sender: gone with it)
                        status, value = "died", None
                    pending.discard(rank)
                    if status == "died":
                        errors.append(self._died(rank, method, proc.exitcode))
                    elif status == "ok":
                        results[rank] = value
                    else:
                        errors.append(f"{self._who}rank {rank} failed in {method}: {value}")
                elif not proc.is_alive() and not conn.poll(0):
                    pending.discard(rank)
                    errors.append(self._died(rank, method, proc.exitcode))
            if errors and pending:
                # a rank failed: the others may wait forever in a collective
                self.close(force=True)
                break
        if errors:
            raise WorkerError("\n".join(after_a_death(errors)))
        return results

    def _died(self, rank: int, method: str, code: int | None) -> str:
        return f"{self._who}rank {rank} died during {method} with exit code {code}{_killed_by(code)}"

    def dead_ranks(self) -> list[tuple[int, int | None]]:
        """``(rank, exit code)`` of every worker process that is no longer running."""
        return [(rank, proc.exitcode) for rank, proc in enumerate(self._procs) if not proc.is_alive()]

    @property
    def _who(self) -> str:
        return f"{'+'.join(self.roles)} pool " if self.roles else ""

    def close(self, force: bool = False) -> None:
        if self._local is not None:
            self._local.shutdown()
            self._local = None
            return
        if not force:
            for conn, proc in zip(self._conns, self._procs):
                if proc.is_alive():
                    try:
                        conn.send(("__stop__", ()))
                    except (BrokenPipeError, OSError):
                        pass
            for conn, proc in zip(self._conns, self._procs):
                try:
                    if conn.poll(30):
                        conn.recv()
                except (EOFError, OSError):  # the worker already ended (reset / closed pipe): nothing to wait for
                    pass
        for proc in self._procs:
            proc.join(timeout=0 if force else 10)
            if proc.is_alive():  # a rank still ending its engine's processes is killed with them
                _kill_with_its_children(proc)
        self._procs, self._conns = [], []
        if self._store_dir is not None:
            shutil.rmtree(self._store_dir, ignore_errors=True)
            self._store_dir = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close(force=exc[0] is not None)
