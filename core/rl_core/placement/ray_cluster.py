"""RayCluster: the hybrid workers as Ray actors, on one node or many.

Same interface as :class:`rl_core.cluster.LocalCluster`: ``call(method,
per_rank_args)`` runs ``method`` on every rank's
:class:`~rl_core.worker.HybridWorker` and returns one result per rank, in
rank order; ``close()`` stops them. The controller does not know which one
it drives.

Start-up: join or start Ray (:mod:`~rl_core.placement.ray_connect`), reserve
one bundle per rank (:mod:`~rl_core.placement.ray_pools`: ``trainer.nnodes``
x ``trainer.n_gpus_per_node``), start one actor per bundle, form the
``torch.distributed`` group among them (master: rank 0's node, a port free
there; timeout ``ray.collective_timeout_s``), then build the workers.

Failures end the run, never hang it: results are awaited with ``ray.wait``
so the first rank that fails or dies (killed, OOM, segfault: Ray reports the
actor dead within about a second; a lost node after Ray's health checks)
stops the others at once, and the error names the role, the rank, its node
and what happened. Checkpoints are only ever renamed into place when
complete, so the same command resumes from the last one.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Sequence

from rl_core.cluster import WorkerError
from rl_core.placement.ray_connect import connect, import_ray
from rl_core.placement.ray_pools import ResourcePool
from rl_core.placement.ray_worker import RankFailure, RankWorker

GRACE_S = 2.0  # after one rank fails, how long the others may take to report their own error


def roles_of(config) -> tuple[str, ...]:
    """The roles one hybrid worker holds: they share its process and its device."""
    roles = ["actor"]
    if config.ref.enable:
        roles.append("ref")
    if config.critic.enable:
        roles.append("critic")
    roles.append("rollout")
    return tuple(roles)


class RayCluster:
    """One :class:`RankWorker` actor per rank, placed by a :class:`ResourcePool`."""

    def __init__(self, stack, *, log_placement: bool = True) -> None:
        ray = import_ray()
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        config = stack.config
        trainer, rcfg = config.trainer, config.ray
        self.world_size = stack.sizes.world_size
        self.device = stack.sizes.device
        self.output_dir = trainer.output_dir
        self.pool = ResourcePool(roles_of(config), trainer.nnodes, trainer.n_gpus_per_node, self.device, rcfg.cpus_per_worker)
        self.role = self.pool.name
        self._actors: list[Any] = []
        self.placement: list[dict[str, Any]] = []
        self._owns_connection = connect(rcfg)
        try:
            slots = self.pool.create(rcfg.start_timeout_s)
            threads = trainer.torch_threads
            if threads is None and self.device == "cpu":
                threads = max(1, int(rcfg.cpus_per_worker))
            actor_cls = ray.remote(RankWorker)
            for slot in slots:
                options = {
                    "num_cpus": rcfg.cpus_per_worker,
                    "num_gpus": 1 if self.device == "cuda" else 0,
                    "scheduling_strategy": PlacementGroupSchedulingStrategy(slot.group, placement_group_bundle_index=slot.bundle_index),
                    "max_restarts": 0,
                    "max_task_retries": 0,
                }
                self._actors.append(actor_cls.options(**options).remote(self.role, slot.rank, self.world_size, slot.local_rank, threads))
            self.placement = self._wait([a.where.remote() for a in self._actors], "start (placing the actors)")
            if log_placement:
                print(self.describe(), flush=True)
            if self.world_size > 1:
                port = self._wait([self._actors[0].free_port.remote()], "start (finding a port)", ranks=[0])[0]
                backend = "nccl" if self.device == "cuda" else "gloo"
                master = self.placement[0]["ip"]
                self._wait([a.init_group.remote(master, port, backend, rcfg.collective_timeout_s) for a in self._actors], "start (process group)")
            device = "cuda:0" if self.device == "cuda" else "cpu"  # Ray shows each actor only its own GPU
            stack_ref = ray.put(stack)
            self._wait([a.start.remote(stack_ref, device, trainer.seed) for a in self._actors], "start (building the workers)")
        except BaseException:
            self.close(force=True)
            raise

    # ------------------------------------------------------------------ calls
    def call(self, method: str, per_rank_args: Sequence[tuple] | None = None, *, same_args: tuple = ()) -> list[Any]:
        """Call ``method`` on every rank; ``per_rank_args[r]`` or ``same_args`` for all."""
        args = list(per_rank_args) if per_rank_args is not None else [same_args] * self.world_size
        if len(args) != self.world_size:
            raise ValueError(f"{method}: got arguments for {len(args)} ranks, the cluster has {self.world_size}")
        if not self._actors:
            raise WorkerError(f"{method}: the Ray workers were stopped (an earlier failure, or close())")
        return self._wait([a.call.remote(method, tuple(x)) for a, x in zip(self._actors, args)], method)

    def run_on_workers(self, fn: Callable[..., Any], *args: Any) -> list[Any]:
        """``fn(info, *args)`` on every rank (a top-level function): checks and probes."""
        return self._wait([a.run.remote(fn, args) for a in self._actors], getattr(fn, "__name__", "run"))

    def describe(self) -> str:
        lines = [f"ray: {self.world_size} worker(s) [{self.role}] in {len(self.pool.groups)} placement group(s)"]
        for p in self.placement:
            gpus = f" gpu {','.join(p['gpu_ids'])}" if p.get("gpu_ids") else ""
            lines.append(f"  rank {p['rank']} -> node {p['ip']} ({p['node_id'][:8]}, {p['hostname']}) pid {p['pid']}{gpus}")
        return "\n".join(lines)

    def where(self, rank: int) -> str:
        if rank < len(self.placement):
            p = self.placement[rank]
            return f"node {p['ip']} ({p['node_id'][:8]}, {p['hostname']}, pid {p['pid']})"
        return "a node not known yet"

    # ---------------------------------------------------------------- waiting
    def _wait(self, refs: list, method: str, ranks: list[int] | None = None) -> list[Any]:
        import ray

        ranks = list(range(len(refs))) if ranks is None else ranks
        results: list[Any] = [None] * len(refs)
        pending = {ref: (i, rank) for i, (ref, rank) in enumerate(zip(refs, ranks))}
        errors: list[tuple[int, str]] = []
        failed_at = None
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=0.5)
            for ref in ready:
                i, rank = pending.pop(ref)
                try:
                    results[i] = ray.get(ref)
                except Exception as exc:  # noqa: BLE001 - every Ray failure becomes one clear error
                    errors.append((rank, self._failure_text(rank, method, exc)))
            if errors and failed_at is None:
                failed_at = time.monotonic()
            if errors and pending and time.monotonic() - failed_at > GRACE_S:
                # the others are likely blocked in a collective with the failed rank: stop them all
                break
        if errors:
            self.close(force=True)
            errors.sort(key=lambda e: (" died" not in e[1], e[0]))
            stopped = sorted(rank for _, rank in pending.values())
            tail = f"\nranks {stopped} were stopped after that." if stopped else ""
            resume = f"\nThe last complete checkpoint (if any) is under {self.output_dir}/checkpoints: run the same command to resume from it."
            raise WorkerError("\n".join(text for _, text in errors) + tail + resume)
        return results

    def _failure_text(self, rank: int, method: str, exc: BaseException) -> str:
        import ray.exceptions as rex

        who = f"rank {rank} [{self.role}] on {self.where(rank)}"
        cause = getattr(exc, "cause", None)
        if isinstance(exc, rex.RayTaskError) and isinstance(cause, RankFailure):
            return f"{who} failed in {method}: {cause}"
        if isinstance(exc, rex.OutOfMemoryError):
            return f"{who} died during {method}: killed by Ray's memory monitor (out of memory); lower the micro-batch sizes"
        if isinstance(exc, rex.RayActorError):
            return f"{who} died during {method}: {_death_reason(exc)}"
        return f"{who} failed in {method}: {type(exc).__name__}: {exc}"

    # ---------------------------------------------------------------- closing
    def close(self, force: bool = False) -> None:
        import ray

        actors, self._actors = self._actors, []
        if actors and not force:
            try:
                ray.get([a.stop.remote() for a in actors], timeout=30)
            except Exception:  # noqa: BLE001 - stopping anyway
                pass
        for a in actors:
            try:
                ray.kill(a, no_restart=True)
            except Exception:  # noqa: BLE001
                pass
        if ray.is_initialized():
            self.pool.remove()
        if self._owns_connection and ray.is_initialized():
            ray.shutdown()
        self._owns_connection = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close(force=exc[0] is not None)


def _death_reason(exc: BaseException) -> str:
    """The useful lines of Ray's actor-died message: how the process ended and the usual causes."""
    text = str(exc)
    for marker in ("Worker exit detail:", "The actor is dead because"):
        at = text.find(marker)
        if at >= 0:
            reason = " ".join(text[at:].split())
            break
    else:
        reason = " ".join(text.split())
    if len(reason) > 600:
        reason = reason[:600] + " ..."
    return reason + " (a killed or crashed worker process: out of memory, a segfault, or a node that went away)"
