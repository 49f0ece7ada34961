"""Where the workers run: picks the placement layer named by ``trainer.placement``.

``local`` (default): :class:`rl_core.placement.local.LocalCluster`, this machine, no Ray.
``ray``: :class:`rl_core.placement.ray_cluster.RayCluster`, a Ray cluster of one
or many nodes (docs/ray.md). Both implement :class:`rl_core.placement.contract.Placement`
(``submit`` / ``call`` a typed :class:`~rl_core.placement.contract.WorkerMethod`
per rank, ``close()``); the controller (:mod:`rl_core.trainer.loop`) only calls
:func:`make_cluster` and that protocol, and never learns which one it got. Roles given devices of
their own (``critic.n_gpus_per_node``, ``ref.n_gpus_per_node``) get one such
cluster each, behind :class:`rl_core.placement.pools.PooledCluster`.
"""

from __future__ import annotations
from rl_core.placement.ray_cluster import RayCluster


def make_cluster(stack):
    """The placement layer for ``stack.config.trainer.placement``, workers started (a ``Placement``)."""
    make = _maker(stack)
    if not stack.sizes.pools:
        return make(stack)
    from rl_core.placement.pools import make_pooled_cluster

    return make_pooled_cluster(stack, make)


def start_pool(stack, *, roles, pool: str = "main"):
    """One pool's placement, workers holding ``roles``, with the configured placement (``trainer.placement``).

    ``pool``: ``main`` (the actor's ranks) or a name in ``stack.sizes.pools`` (its workers and devices).
    """
    return _maker(stack)(stack, roles=roles, pool=pool)


def _maker(stack):
    return _ray_cluster if stack.config.trainer.placement == "ray" else _local_cluster


def _ray_cluster(stack, *, roles=None, pool: str = "main"):
    return RayCluster(stack, roles=roles, pool=pool)


def _local_cluster(stack, *, roles=None, pool: str = "main"):
    from rl_core.placement.local import LocalCluster

    if pool == "main":
        return LocalCluster(stack, roles=roles, processes=_local_processes(stack))
    # a pool's GPUs come after the actor's and the pools sorted before it (make_pooled_cluster's order)
    first = stack.sizes.world_size + sum(stack.sizes.pools[r][0] for r in sorted(stack.sizes.pools) if r < pool)
    return LocalCluster(stack, spawn=True, roles=roles, world_size=stack.sizes.pools[pool][0], first_device=first, processes=_local_processes(stack))


def _local_processes(stack) -> int:
    """Worker processes on this machine in all: each gets its share of the cores."""
    return stack.sizes.world_size + sum(w for w, _ in stack.sizes.pools.values())
