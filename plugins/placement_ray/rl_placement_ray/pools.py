"""Resource pools: the Ray placement groups that reserve one worker group's devices.

A pool is ``nnodes x per_node`` bundles of ``{"CPU": cpus_per_worker}`` (plus
``{"GPU": 1}`` on CUDA), one bundle per rank. Roles that share a pool share
its bundles: the hybrid worker holds the actor, reference, critic and rollout
engine in one process, so colocated roles use the same GPU.

How the bundles are laid out, so that ``trainer.nnodes`` and
``trainer.n_gpus_per_node`` mean what they say:

- one node: one placement group, ``STRICT_PACK`` (every rank on one node);
- one rank per node: one placement group, ``STRICT_SPREAD`` (every rank on
  its own node);
- otherwise: one ``STRICT_PACK`` group per node, ranks numbered node by node
  (ranks ``k * per_node ... (k + 1) * per_node - 1`` share node ``k``).

Creating a pool waits until Ray has placed every bundle, at most
``timeout_s``; a cluster without room gets an error listing what each node
has, never a silent wait.
"""

from __future__ import annotations

import attrs
from rl_core.problems import UserError

from rl_placement_ray.connect import describe_resources


class PlacementError(UserError):
    """The cluster cannot hold the workers the config asks for."""


@attrs.frozen(kw_only=True)
class Slot:
    """Where one rank goes: a bundle of a placement group."""

    rank: int
    local_rank: int
    node_group: int
    group: object  # ray.util.placement_group.PlacementGroup
    bundle_index: int


@attrs.define
class ResourcePool:
    roles: tuple[str, ...]
    nnodes: int
    per_node: int
    device: str
    cpus_per_worker: float = 1.0
    section: str = "trainer"  # the config section whose nnodes / n_gpus_per_node laid it out (errors name its keys)
    groups: list = attrs.field(factory=list)

    @property
    def name(self) -> str:
        return "+".join(self.roles)

    @property
    def world_size(self) -> int:
        return self.nnodes * self.per_node

    def bundle(self) -> dict[str, float]:
        out = {"CPU": float(self.cpus_per_worker)}
        if self.device == "cuda":
            out["GPU"] = 1.0
        return out

    def layout(self) -> list[tuple[str, int]]:
        """``[(strategy, bundles)]`` of the placement groups this pool needs."""
        if self.nnodes == 1:
            return [("STRICT_PACK", self.per_node)]
        if self.per_node == 1:
            return [("STRICT_SPREAD", self.nnodes)]
        return [("STRICT_PACK", self.per_node)] * self.nnodes

    def create(self, timeout_s: float) -> list[Slot]:
        """Reserve the bundles (waits for them); one :class:`Slot` per rank, in rank order."""
        import ray
        from ray.util.placement_group import placement_group

        self.groups = [placement_group([self.bundle()] * n, strategy=strategy) for strategy, n in self.layout()]
        ready, _ = ray.wait([g.ready() for g in self.groups], num_returns=len(self.groups), timeout=timeout_s)
        if len(ready) < len(self.groups):
            self.remove()
            need = f"{self.world_size} x {self.bundle()}"
            raise PlacementError(
                f"the Ray cluster has no room for the {self.name} workers within {timeout_s:g} s (ray.start_timeout_s): "
                f"they need {need} laid out as {self.section}.nnodes={self.nnodes} x {self.section}.n_gpus_per_node={self.per_node}; "
                f"the cluster has:\n{describe_resources()}\n"
                f"fix: lower {self.section}.nnodes / {self.section}.n_gpus_per_node (or ray.cpus_per_worker), add nodes, "
                "or wait for other jobs to free them"
            )
        slots = []
        for gi, (strategy, n) in enumerate(self.layout()):
            for b in range(n):
                rank = len(slots)
                local = 0 if strategy == "STRICT_SPREAD" else b
                slots.append(Slot(rank=rank, local_rank=local, node_group=gi if strategy != "STRICT_SPREAD" else b, group=self.groups[gi], bundle_index=b))
        return slots

    def remove(self) -> None:
        from ray.util.placement_group import remove_placement_group

        for g in self.groups:
            try:
                remove_placement_group(g)
            except Exception:  # noqa: BLE001 - already gone with the cluster
                pass
        self.groups = []
