"""Where the workers run: the placement the Plan's card names (``trainer.placement``): ``local`` (registered here,
this machine) or a plugin's ``PlacementCard`` (``ray``: rl-placement-ray, docs/ray.md). The controller only calls
:func:`make_cluster` and the :class:`~rl_core.placement.contract.Placement` protocol; roles with devices of their own
get a cluster each, behind ``PooledCluster``.
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
    """One pool's placement (``main`` or a name in ``stack.sizes.pools``), workers holding ``roles``."""
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
