"""Where the workers run: picks the placement layer named by ``trainer.placement``.

``local`` (default): :class:`rl_core.cluster.LocalCluster`, this machine, no Ray.
``ray``: :class:`rl_core.placement.ray_cluster.RayCluster`, a Ray cluster of one
or many nodes (docs/ray.md). Both expose the same ``call(method, per_rank_args)``
and ``close()``; the controller (:mod:`rl_core.trainer.loop`) only calls
:func:`make_cluster` and never learns which one it got. Roles given devices of
their own (``critic.n_gpus_per_node``, ``ref.n_gpus_per_node``) get one such
cluster each, behind :class:`rl_core.placement.pools.PooledCluster`.
"""

from __future__ import annotations


def make_cluster(stack):
    """The placement layer for ``stack.config.trainer.placement``, workers started."""
    make = _ray_cluster if stack.config.trainer.placement == "ray" else _local_cluster
    if not stack.sizes.pools:
        return make(stack)
    from rl_core.placement.pools import make_pooled_cluster

    return make_pooled_cluster(stack, make)


def _ray_cluster(stack, *, roles=None, pool: str = "main"):
    from rl_core.placement.ray_cluster import RayCluster

    return RayCluster(stack, roles=roles, pool=pool)


def _local_cluster(stack, *, roles=None, pool: str = "main"):
    from rl_core.cluster import LocalCluster

    if pool == "main":
        return LocalCluster(stack, roles=roles, processes=_local_processes(stack))
    # a pool's GPUs come after the actor's and the pools sorted before it (make_pooled_cluster's order)
    first = stack.sizes.world_size + sum(stack.sizes.pools[r][0] for r in sorted(stack.sizes.pools) if r < pool)
    return LocalCluster(stack, spawn=True, roles=roles, world_size=stack.sizes.pools[pool][0], first_device=first, processes=_local_processes(stack))


def _local_processes(stack) -> int:
    """Worker processes on this machine in all: each gets its share of the cores."""
    return stack.sizes.world_size + sum(w for w, _ in stack.sizes.pools.values())
