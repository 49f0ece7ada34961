"""Where the workers run: the placement the Plan's card names (``trainer.placement``, resolved once).

``local`` (default, registered here): :class:`rl_core.placement.local.LocalCluster`, this machine, no Ray.
Others come from plugins as a :class:`~rl_core.cards.PlacementCard` (``ray``: the rl-placement-ray distribution,
a Ray cluster of one or many nodes, docs/ray.md). Each implements :class:`rl_core.placement.contract.Placement`
(``submit`` / ``call`` a typed :class:`~rl_core.placement.contract.WorkerMethod` per rank, ``close()``); the
controller (:mod:`rl_core.trainer.loop`) only calls :func:`make_cluster` and that protocol, and never learns which
one it got. Roles given devices of their own (``critic.n_gpus_per_node``, ``ref.n_gpus_per_node``) get one such
cluster each, behind :class:`rl_core.placement.pools.PooledCluster`.
"""

from __future__ import annotations

from rl_core.cards import PlacementCard
from rl_core.hookspecs import hookimpl

LOCAL = PlacementCard(name="local", factory="rl_core.placement:local_placement",
                      description="this machine: one rank in-process, more as spawned processes (no Ray)")


@hookimpl
def rl_core_register_placements(register):
    register(LOCAL)


def make_cluster(stack):
    """The placement of the Plan's card (``stack.placement``, ``trainer.placement``), workers started (a ``Placement``)."""
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
    """The factory of the Plan's placement card (a stack built in code without one: local, the only one it may mean)."""
    card = getattr(stack, "placement", None)
    if card is None:
        if stack.config.trainer.placement != LOCAL.name:
            raise ValueError(f"trainer.placement={stack.config.trainer.placement}: this stack has no placement card; build it with rl_core.plan")
        card = LOCAL
    return card.load()


def local_placement(stack, *, roles=None, pool: str = "main"):
    """The ``local`` card's factory: this machine's processes for ``pool`` (the actor's, or a role's of its own)."""
    from rl_core.placement.local import LocalCluster

    if pool == "main":
        return LocalCluster(stack, roles=roles, processes=_local_processes(stack))
    # a pool's GPUs come after the actor's and the pools sorted before it (make_pooled_cluster's order)
    first = stack.sizes.world_size + sum(stack.sizes.pools[r][0] for r in sorted(stack.sizes.pools) if r < pool)
    return LocalCluster(stack, spawn=True, roles=roles, world_size=stack.sizes.pools[pool][0], first_device=first, processes=_local_processes(stack))


def _local_processes(stack) -> int:
    """Worker processes on this machine in all: each gets its share of the cores."""
    return stack.sizes.world_size + sum(w for w, _ in stack.sizes.pools.values())
