"""Run a function on N freshly spawned processes joined by ``torch.distributed``.

::

    def check(rank, world_size, model_dir):      # top level: it is pickled by name
        ...
        return {"loss": 1.0}

    results = run_distributed(check, 2, model_dir)   # [result of rank 0, result of rank 1]

Each rank is a ``spawn`` process (a fresh interpreter: nothing of the parent's
torch state leaks in), or a child of the forkserver given to :func:`start_ranks_from`
(a fresh interpreter that imported torch & co. once: the test suites' conftest does
this, so that a rank costs its work, not its imports), with the caller's environment
and working directory, one torch thread, ``MASTER_ADDR`` / ``MASTER_PORT``
/ ``RANK`` / ``WORLD_SIZE`` / ``LOCAL_RANK`` set and the default process
group initialised (gloo by default). Results travel back pickled (tensors
included, by value). A rank that raises makes the call raise
:class:`DistributedError` with that rank's traceback; a rank that dies
without a word (segfault, OOM kill) is reported with its exit code; a run
longer than ``timeout`` seconds is killed and reported. The other ranks are
terminated in every case, so a failing test never hangs.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import pickle
import socket
import time
import traceback
from datetime import timedelta
from typing import Any, Callable


@contextlib.contextmanager
def torch_threads(n: int | None):
    """Run the block with ``torch.set_num_threads(n)`` (``None``: unchanged), then restore.

    Tiny test models gain nothing from intra-op threads, and on a busy
    2-core machine two threads per process make every step 10x slower.
    """
    import torch

    old = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


_RANK_CONTEXT = None  # multiprocessing context the ranks start from; None: "spawn"


def start_ranks_from(context):
    """Start :func:`run_distributed`'s ranks from ``context`` (``None``: spawn, the default).

    For a ``forkserver`` context with modules preloaded (``set_forkserver_preload``): a rank is then a fork of that
    server (a fresh interpreter that only imported those), not a new interpreter importing torch again. A rank still
    gets the caller's current environment and working directory, as a spawned one does.
    """
    global _RANK_CONTEXT
    previous, _RANK_CONTEXT = _RANK_CONTEXT, context
    return previous  # to restore


class DistributedError(RuntimeError):
    """One or more ranks failed (message holds each failing rank's traceback)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(conn, fn, rank: int, world_size: int, port: int, backend: str, threads: int, timeout: float, args: tuple, env: dict, cwd: str) -> None:
    # the caller's environment and folder now (a forkserver's child would otherwise have the server's, from its start)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank)
    )
    try:
        import torch
        import torch.distributed as dist

        torch.set_num_threads(threads)
        if backend == "nccl":
            torch.cuda.set_device(rank)
        dist.init_process_group(
            backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size, timeout=timedelta(seconds=timeout),
            device_id=torch.device("cuda", rank) if backend == "nccl" else None,
        )
        try:
            result = fn(rank, world_size, *args)
        finally:
            if dist.is_initialized():
                dist.destroy_process_group()
        payload = ("ok", pickle.dumps(result))
    except BaseException as exc:  # noqa: BLE001 - report anything, even SystemExit
        payload = ("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")
    try:
        conn.send(payload)
    finally:
        conn.close()


def _died(proc) -> str:
    """What to say of a rank that ended without sending a result."""
    proc.join(timeout=2)
    return f"process died with exit code {proc.exitcode} and no result (killed? segfault? os._exit?)"


def run_distributed(
    fn: Callable[..., Any],
    world_size: int,
    *args: Any,
    backend: str = "gloo",
    timeout: float = 240.0,
    threads: int = 1,
) -> list[Any]:
    """``[fn(0, world_size, *args), ..., fn(world_size - 1, world_size, *args)]`` run in parallel processes.

    ``fn`` and ``args`` must be picklable (a top-level function of an
    importable module). Raises :class:`DistributedError` when any rank
    fails or dies, :class:`TimeoutError` after ``timeout`` seconds.
    """
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    ctx = _RANK_CONTEXT or mp.get_context("spawn")
    port = free_port()
    env, cwd = dict(os.environ), os.getcwd()
    procs, conns = [], []
    try:
        for rank in range(world_size):
            parent, child = ctx.Pipe(duplex=False)
            proc = ctx.Process(
                target=_rank_main,
                args=(child, fn, rank, world_size, port, backend, threads, timeout, args, env, cwd),
                name=f"rl-core-test-rank-{rank}",
                daemon=True,
            )
            proc.start()
            child.close()
            procs.append(proc)
            conns.append(parent)
        results: list[Any] = [None] * world_size
        errors: dict[int, str] = {}
        pending = set(range(world_size))
        deadline = time.monotonic() + timeout
        while pending:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"run_distributed({getattr(fn, '__name__', fn)}, {world_size}): ranks {sorted(pending)} did not finish within {timeout:.0f} s"
                    + (_format_errors(errors) if errors else "")
                )
            for rank in sorted(pending):
                conn, proc = conns[rank], procs[rank]
                if conn.poll(0.05):
                    try:
                        status, value = conn.recv()
                    except EOFError:
                        status, value = "error", _died(proc)
                    pending.discard(rank)
                    if status == "ok":
                        results[rank] = pickle.loads(value)
                    else:
                        errors[rank] = value
                elif not proc.is_alive() and not conn.poll(0):
                    pending.discard(rank)
                    errors[rank] = _died(proc)
            if errors and pending:
                # A failed rank usually leaves the others blocked in a collective: give them a moment, then stop them.
                grace = time.monotonic() + 2.0
                while pending and time.monotonic() < grace:
                    for rank in sorted(pending):
                        if conns[rank].poll(0.05):
                            try:
                                status, value = conns[rank].recv()
                            except EOFError:
                                status, value = "error", _died(procs[rank])
                            pending.discard(rank)
                            if status != "ok":
                                errors[rank] = value
                for rank in sorted(pending):
                    errors.setdefault(rank, "stopped after another rank failed")
                pending.clear()
        if errors:
            raise DistributedError(
                f"run_distributed({getattr(fn, '__name__', fn)}, {world_size}): {len(errors)} rank(s) failed" + _format_errors(errors)
            )
        return results
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
        for proc in procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=5)
        for conn in conns:
            conn.close()


def _format_errors(errors: dict[int, str]) -> str:
    return "".join(f"\n--- rank {rank} ---\n{text}" for rank, text in sorted(errors.items()))
