"""Run a function once on each of N fresh local processes joined by a ``torch.distributed`` group.

``rlcore doctor``'s collective check (:mod:`rl_doctor.doctor`) runs its all-reduce with it. The ranks meet
as core's ``local`` placement's workers do: a FileStore in a private folder (0700), gloo /
NCCL bound to the loopback interface, so the check exercises the rendezvous a local run uses and opens nothing to
the network. ``fn`` is called as ``fn(rank, world_size, *args)`` in a ``spawn`` process (a top-level function:
it is pickled by name) with one torch thread; its results come back pickled. A rank that raises or dies makes the
call raise :class:`LocalGroupError` with every failing rank's error; ranks still running ``timeout`` seconds after
the start (or 2 s after another rank failed) are stopped and named.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import tempfile
import time
import traceback
from datetime import timedelta
from multiprocessing.connection import wait
from typing import Any, Callable

from rl_core.placement.local import local_rendezvous_env

GRACE_S = 2.0  # how long the other ranks may still answer after one failed (they usually wait in a collective)


class LocalGroupError(RuntimeError):
    """One or more ranks failed, died or did not finish (the message names each and ends with the last error)."""


def _rank_main(conn, fn, rank: int, world_size: int, backend: str, store_file: str, timeout: float, env: dict, args: tuple) -> None:
    os.environ.update(env)
    try:
        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)
        if backend == "nccl":
            torch.cuda.set_device(rank)
        dist.init_process_group(
            backend, init_method=f"file://{store_file}", rank=rank, world_size=world_size, timeout=timedelta(seconds=timeout),
            device_id=torch.device("cuda", rank) if backend == "nccl" else None,
        )
        try:
            payload = ("ok", fn(rank, world_size, *args))
        finally:
            dist.destroy_process_group()
    except BaseException as exc:  # noqa: BLE001 - report anything, even SystemExit
        payload = ("error", f"{traceback.format_exc()}{type(exc).__name__}: {exc}")
    try:
        conn.send(payload)
    finally:
        conn.close()


def run_on_local_group(fn: Callable[..., Any], world_size: int, *args: Any, backend: str = "gloo", timeout: float = 180.0) -> list[Any]:
    """``[fn(0, world_size, *args), ..., fn(world_size - 1, world_size, *args)]``, each on its own process."""
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    ctx = mp.get_context("spawn")
    folder = tempfile.mkdtemp(prefix="rl-core-group-")  # 0700: only this user
    env = local_rendezvous_env()
    procs, conns = [], []
    try:
        for rank in range(world_size):
            parent, child = ctx.Pipe(duplex=False)
            proc = ctx.Process(
                target=_rank_main, args=(child, fn, rank, world_size, backend, os.path.join(folder, "store"), timeout, env, args),
                name=f"rl-core-group-rank-{rank}", daemon=True,
            )
            proc.start()
            child.close()  # a rank that dies closes the pipe's last writer: its end reads EOF
            procs.append(proc)
            conns.append(parent)
        results: list[Any] = [None] * world_size
        errors: dict[int, str] = {}
        pending = {conn: rank for rank, conn in enumerate(conns)}
        deadline = time.monotonic() + timeout
        while pending:
            ready = wait(list(pending), timeout=max(0.0, deadline - time.monotonic()))
            if not ready:
                break
            for conn in ready:
                rank = pending.pop(conn)
                try:
                    status, value = conn.recv()
                except EOFError:
                    procs[rank].join(timeout=2)
                    status, value = "error", f"the process died with exit code {procs[rank].exitcode} and no result"
                if status == "ok":
                    results[rank] = value
                else:
                    errors[rank] = value
            if errors:
                deadline = min(deadline, time.monotonic() + GRACE_S)
        first = next(iter(errors.values()), None)  # the first error that came back: the cause, usually
        for rank in sorted(pending.values()):
            errors[rank] = "stopped after another rank failed" if first else f"did not finish within {timeout:.0f} s"
        if errors:
            detail = "".join(f"\n--- rank {rank} ---\n{text}" for rank, text in sorted(errors.items()))
            cause = (first or errors[min(errors)]).strip().splitlines()[-1]
            raise LocalGroupError(f"{getattr(fn, '__name__', fn)} on {world_size} {backend} process(es): {len(errors)} rank(s) failed{detail}\n{cause}")
        return results
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
            proc.join(timeout=5)
        for conn in conns:
            conn.close()
        shutil.rmtree(folder, ignore_errors=True)
