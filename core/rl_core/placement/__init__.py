"""Where the workers run: picks the placement layer named by ``trainer.placement``.

``local`` (default): :class:`rl_core.cluster.LocalCluster`, this machine, no Ray.
``ray``: :class:`rl_core.placement.ray_cluster.RayCluster`, a Ray cluster of one
or many nodes (docs/ray.md). Both expose the same ``call(method, per_rank_args)``
and ``close()``; the controller (:mod:`rl_core.trainer.loop`) only calls
:func:`make_cluster` and never learns which one it got.
"""

from __future__ import annotations


def make_cluster(stack):
    """The placement layer for ``stack.config.trainer.placement``, workers started."""
    if stack.config.trainer.placement == "ray":
        from rl_core.placement.ray_cluster import RayCluster

        return RayCluster(stack)
    from rl_core.cluster import LocalCluster

    return LocalCluster(stack)
