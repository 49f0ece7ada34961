"""What runs inside each Ray actor: one rank's hybrid worker and its process group.

:class:`RankWorker` is a plain class; :class:`~rl_placement_ray.cluster.RayCluster`
wraps it with ``ray.remote`` (so importing this module needs no Ray). The
actor is told its rank and world, joins the workers' ``torch.distributed``
group (gloo on CPU, NCCL on GPU; the store is rank 0's, on its node's Ray address
at a port free there; ranks that share one node meet through a FileStore there
and bind loopback: :mod:`rl_core.placement.rendezvous`), then builds the same :class:`~rl_core.placement.worker.HybridWorker`
the local cluster builds, with the same :class:`~rl_core.backends.WorkerContext`.

Errors travel back as :class:`RankFailure` with plain text: a user error's
message, anything else with this rank's traceback; a collective that timed
out is named with its group, backend, size and the timeout key.
"""

from __future__ import annotations

import os
import socket
import traceback
from datetime import timedelta
from typing import Any, Callable

from rl_core.placement.contract import dispatch
from rl_core.placement.rendezvous import Rendezvous, join_store
from rl_core.problems import UserError

GROUP_NAME = "workers"  # the default process group of one worker group: every rank of it


class RankFailure(RuntimeError):
    """A rank's method raised; the text says what, where, and (when not a user error) the traceback."""


def describe_error(exc: BaseException) -> str:
    if isinstance(exc, UserError):
        return f"{type(exc).__name__}: {exc}"
    return f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"


def looks_like_timeout(exc: BaseException) -> bool:
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and ("timed out" in text or "timeout" in text)


class RankWorker:
    def __init__(self, role: str, rank: int, world_size: int, local_rank: int, threads: int | None) -> None:
        import torch

        self.role, self.rank, self.world_size, self.local_rank = role, rank, world_size, local_rank
        self.worker = None
        self.backend: str | None = None
        self.timeout_s: float | None = None
        if threads:
            torch.set_num_threads(threads)

    # ------------------------------------------------------------ placement
    def where(self) -> dict[str, Any]:
        import ray

        return {
            "rank": self.rank,
            "node_id": ray.get_runtime_context().get_node_id(),
            "ip": ray.util.get_node_ip_address(),
            "hostname": socket.gethostname(),
            "pid": os.getpid(),
            "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
        }

    def open_rendezvous(self, host: str | None) -> str:
        """Rank 0: where the group meets. ``host`` None: a FileStore in a private folder on this node (every rank
        is here); else a TCP store listening on ``host`` only (this node's Ray address), at a port free there."""

        self._rendezvous = Rendezvous(host)
        return self._rendezvous.address

    def init_group(self, init_method: str, backend: str, timeout_s: float, loopback: bool = False) -> None:
        """Join the group; ``loopback``: every rank is on this node, so gloo / NCCL bind the loopback interface."""
        import torch
        import torch.distributed as dist
        from rl_core.placement.local import local_rendezvous_env

        self.backend, self.timeout_s = backend, timeout_s
        if loopback:
            os.environ.update(local_rendezvous_env())
        try:
            if backend == "nccl":
                torch.cuda.set_device(0)  # Ray shows each actor only its own GPU
            store = join_store(init_method, self.rank, self.world_size, timeout_s, getattr(self, "_rendezvous", None))
            dist.init_process_group(
                backend, store=store, rank=self.rank, world_size=self.world_size, timeout=timedelta(seconds=timeout_s),
                device_id=torch.device("cuda", 0) if backend == "nccl" else None,
            )
        except Exception as exc:  # noqa: BLE001
            raise RankFailure(
                f"rank {self.rank} could not join process group {GROUP_NAME!r} ({backend}, {self.world_size} ranks, rendezvous "
                f"{init_method}): {type(exc).__name__}: {exc}\nfix: the nodes must reach each other on that port "
                "(firewall, the interface Ray picked: set NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME in ray.runtime_env.env_vars)"
            ) from None

    # --------------------------------------------------------------- worker
    def start(self, stack, device: str, seed: int, roles: tuple[str, ...] | None = None) -> None:
        from rl_core.backends import WorkerContext
        from rl_core.placement.worker import HybridWorker

        context = WorkerContext(rank=self.rank, world_size=self.world_size, local_rank=self.local_rank, device=device, seed=seed)
        try:
            self.worker = HybridWorker(stack, context, roles)
        except BaseException as exc:  # noqa: BLE001
            raise RankFailure(self._explain(exc, "start")) from None

    def call(self, method: str, args: tuple) -> Any:
        try:
            return dispatch(self.worker, method, args)
        except BaseException as exc:  # noqa: BLE001
            raise RankFailure(self._explain(exc, method)) from None

    def run(self, fn: Callable[..., Any], args: tuple) -> Any:
        """``fn(info, *args)`` on this rank, ``info`` = :meth:`where` plus the world size (doctor, tests)."""
        try:
            return fn({**self.where(), "world_size": self.world_size, "local_rank": self.local_rank}, *args)
        except BaseException as exc:  # noqa: BLE001
            raise RankFailure(self._explain(exc, getattr(fn, "__name__", "run"))) from None

    def stop(self) -> None:
        import torch.distributed as dist

        try:
            if self.worker is not None:
                self.worker.shutdown()
        finally:
            self.worker = None
            if dist.is_initialized():
                dist.destroy_process_group()
            rendezvous = getattr(self, "_rendezvous", None)
            if rendezvous is not None:
                rendezvous.close()
                self._rendezvous = None

    # -------------------------------------------------------------- helpers
    def _explain(self, exc: BaseException, method: str) -> str:
        import torch.distributed as dist

        if dist.is_initialized() and looks_like_timeout(exc):
            return (
                f"a collective in process group {GROUP_NAME!r} ({self.backend}, {self.world_size} ranks, role {self.role}) "
                f"timed out after {self.timeout_s:g} s during {method}: another rank is stuck or gone. "
                f"If steps are just slow, raise ray.collective_timeout_s.\n{type(exc).__name__}: {exc}"
            )
        return describe_error(exc)
