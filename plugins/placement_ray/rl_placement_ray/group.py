"""A worker group on Ray: one actor per rank in a resource pool, joined by torch.distributed.

:class:`RayWorkerGroup` places the actors (:class:`~rl_placement_ray.worker.RankWorker`,
one per bundle of a :class:`~rl_placement_ray.pools.ResourcePool`), learns
where each landed, and forms the ``torch.distributed`` group among them:
gloo on CPU, NCCL on GPU, the timeout ``collective_timeout_s``. When every rank is on one node (always
so for a local Ray instance) they meet through a FileStore on that node and
gloo / NCCL bind loopback, as the local placement does; across nodes through
rank 0's TCP store, bound to rank 0's node's Ray address only
(:mod:`rl_core.placement.rendezvous`). :class:`~rl_placement_ray.cluster.RayCluster`
builds the hybrid workers on top; ``rlcore doctor --cluster`` runs its probes
on a bare group.

Every wait goes through :meth:`RayWorkerGroup.wait`: the first rank that
fails or dies (killed, OOM, segfault: Ray reports the actor dead within about
a second; a lost node after Ray's health checks) stops every actor of the
group, and the :class:`~rl_core.placement.contract.WorkerError` names the role, the
rank, its node and what happened. Nothing waits forever.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Sequence

from rl_core.placement.contract import WorkerError, after_a_death

from rl_placement_ray.connect import import_ray, node_addresses
from rl_placement_ray.pools import ResourcePool
from rl_placement_ray.worker import RankFailure, RankWorker

GRACE_S = 2.0  # after one rank fails, how long the others may take to report their own error


class RayWorkerGroup:
    def __init__(
        self,
        pool: ResourcePool,
        *,
        collective_timeout_s: float,
        start_timeout_s: float,
        threads: int | None = None,
        after_failure: str = "",
    ) -> None:
        """Place and start the actors, then form their process group (Ray must be initialised)."""
        ray = import_ray()
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        self.pool = pool
        self.role = pool.name
        self.world_size = pool.world_size
        self.after_failure = after_failure
        self.actors: list[Any] = []
        self.placement: list[dict[str, Any]] = []
        try:
            slots = pool.create(start_timeout_s)
            actor_cls = ray.remote(RankWorker)
            for slot in slots:
                options = {
                    "num_cpus": pool.cpus_per_worker,
                    "num_gpus": 1 if pool.device == "cuda" else 0,
                    "scheduling_strategy": PlacementGroupSchedulingStrategy(slot.group, placement_group_bundle_index=slot.bundle_index),
                    "max_restarts": 0,
                    "max_task_retries": 0,
                }
                self.actors.append(actor_cls.options(**options).remote(self.role, slot.rank, self.world_size, slot.local_rank, threads))
            placed = self.wait([a.where.remote() for a in self.actors], "start (placing the actors)")
            registered = node_addresses()  # each node's Ray address: what the process groups below listen on
            self.placement = [{**p, "ip": registered.get(p["node_id"], p["ip"])} for p in placed]
            if self.world_size > 1:
                backend = "nccl" if pool.device == "cuda" else "gloo"
                one_node = len({p["node_id"] for p in self.placement}) == 1
                # one node: a FileStore there and loopback sockets (nothing listens on the network); several: rank 0's
                # TCP store, listening on its node's Ray address only (rl_core.placement.rendezvous)
                host = None if one_node else self.placement[0]["ip"]
                init = self.wait([self.actors[0].open_rendezvous.remote(host)], "start (rendezvous)", ranks=[0])[0]
                self.wait([a.init_group.remote(init, backend, collective_timeout_s, one_node) for a in self.actors], "start (process group)")
        except BaseException:
            self.close(force=True)
            raise

    # ------------------------------------------------------------------ calls
    def call_actors(self, method: str, per_rank_args: Sequence[tuple], what: str | None = None) -> list[Any]:
        """``RankWorker.method(*per_rank_args[r])`` on every rank, results in rank order."""
        return self.submit_actors(method, per_rank_args, what)()

    def submit_actors(self, method: str, per_rank_args: Sequence[tuple], what: str | None = None) -> Callable[[], list[Any]]:
        """Send ``RankWorker.method(*per_rank_args[r])`` to every rank now; the returned function waits for it."""
        if not self.actors:
            raise WorkerError(f"{what or method}: the Ray workers of {self.role} were stopped (an earlier failure, or close())")
        refs = [getattr(a, method).remote(*args) for a, args in zip(self.actors, per_rank_args)]
        return lambda: self.wait(refs, what or method)

    def run(self, fn: Callable[..., Any], *args: Any) -> list[Any]:
        """``fn(info, *args)`` on every rank (a top-level function): checks and probes."""
        return self.call_actors("run", [(fn, args)] * self.world_size, getattr(fn, "__name__", "run"))

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

    def dead_ranks(self, timeout_s: float = 0.5) -> list[tuple[int, None]]:
        """``(rank, None)`` of every actor that is dead: Ray fails a call to it at once; a busy rank counts as alive."""
        import ray
        import ray.exceptions as rex

        refs = {a.where.remote(): rank for rank, a in enumerate(self.actors)}
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=timeout_s)
        dead = []
        for ref in ready:
            try:
                ray.get(ref)
            except rex.RayActorError as exc:
                if not isinstance(exc, rex.ActorUnavailableError):  # unreachable for a moment: not dead
                    dead.append((refs[ref], None))
        return sorted(dead)

    # ---------------------------------------------------------------- waiting
    def wait(self, refs: list, method: str, ranks: list[int] | None = None) -> list[Any]:
        """Every ref's result in order; on any failure stop the group and raise one WorkerError."""
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
                break  # the others are likely blocked in a collective with the failed rank
        if errors:
            self.close(force=True)
            errors.sort(key=lambda e: (" died during " not in e[1], e[0]))
            stopped = sorted(rank for _, rank in pending.values())
            tail = f"\nranks {stopped} were stopped after that." if stopped else ""
            raise WorkerError("\n".join(after_a_death([text for _, text in errors])) + tail + self.after_failure)
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
            return f"{who} died during {method}: {death_reason(exc)}"
        return f"{who} failed in {method}: {type(exc).__name__}: {exc}"

    # ---------------------------------------------------------------- closing
    def close(self, force: bool = False) -> None:
        """Stop every actor (politely unless ``force``) and free the pool's bundles. Idempotent."""
        import ray

        actors, self.actors = self.actors, []
        if not ray.is_initialized():
            return
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
        self.pool.remove()


def death_reason(exc: BaseException) -> str:
    """The useful part of Ray's actor-died message: how the process ended, and the usual causes."""
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
