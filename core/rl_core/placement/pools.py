"""Roles on workers of their own (``critic.n_gpus_per_node``, ``ref.n_gpus_per_node``, ...): workers holding only that
role, with their own process group, on GPUs after the actor's or in their own Ray placement group. Only batches cross
between pools, through the controller, so pools never share a collective. :class:`PooledCluster` routes each call to
the pool of ``WorkerMethod.role`` (every-pool methods to each); adding a pool: docs/design.md (``Placement``).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from rl_core.placement.contract import Pending, WorkerMethod
from rl_core.placement.worker import worker_roles


class PooledCluster:
    """The actor's cluster plus one cluster per role with a pool of its own."""

    def __init__(self, clusters: dict[str, Any]) -> None:
        self.clusters = clusters  # "main" first, then the roles' pools
        self.main = clusters["main"]

    @property
    def world_size(self) -> int:
        return self.main.world_size

    def pool(self, name: str):
        """The placement of one pool (``main``, or a role with workers of its own); KeyError naming the pools."""
        if name not in self.clusters:
            raise KeyError(f"no pool {name!r}: this run has {sorted(self.clusters)}")
        return self.clusters[name]

    def cluster_for(self, method: WorkerMethod | str):
        return self.clusters.get(WorkerMethod.named(method).role, self.main)

    def submit(self, method: WorkerMethod, per_rank_args: Sequence[tuple] | None = None, *, same_args: tuple = ()) -> Pending:
        method = WorkerMethod.named(method)
        if not method.every_pool:
            return self.cluster_for(method).submit(method, per_rank_args, same_args=same_args)
        if per_rank_args is not None:
            raise ValueError(f"{method.value} runs on every pool: pass same_args, not per-rank arguments")
        pending = [c.submit(method, same_args=same_args) for c in self.clusters.values()]
        return Pending(lambda: [r for p in pending for r in p.result()])

    def call(self, method: WorkerMethod, per_rank_args: Sequence[tuple] | None = None, *, same_args: tuple = ()) -> list[Any]:
        return self.submit(method, per_rank_args, same_args=same_args).result()

    def close(self, force: bool = False) -> None:
        for cluster in reversed(list(self.clusters.values())):
            cluster.close(force=force)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close(force=exc[0] is not None)


def make_pooled_cluster(stack, make: Callable[..., Any]) -> PooledCluster:
    """``make(stack, roles=..., pool=...)`` builds one placement per pool (local processes or Ray actors)."""
    clusters: dict[str, Any] = {}
    try:
        clusters["main"] = make(stack, roles=worker_roles(stack.config, rollout=getattr(stack, "needs_rollout", True)), pool="main")
        for role in sorted(stack.sizes.pools):
            clusters[role] = make(stack, roles=worker_roles(stack.config, role), pool=role)
    except BaseException:
        for cluster in reversed(list(clusters.values())):
            cluster.close(force=True)
        raise
    return PooledCluster(clusters)
