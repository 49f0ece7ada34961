"""rl-placement-ray's card: the ``ray`` placement (rl_placement_ray.cluster) and its cluster check (``rlcore doctor
--cluster``, rl_placement_ray.doctor)."""

from __future__ import annotations

from rl_core import hookimpl
from rl_core.cards import ConfigSectionCard, PlacementCard

RAY = PlacementCard(
    name="ray",
    factory="rl_placement_ray.cluster:RayCluster",
    doctor="rl_placement_ray.doctor:run",
    description="a Ray cluster of one node or many: one actor per rank in placement groups (ray.address; docs/ray.md)",
)


@hookimpl
def rl_core_register_placements(register):
    register(RAY)


@hookimpl
def rl_core_register_config_sections(register):
    register(ConfigSectionCard(name="ray", factory="rl_placement_ray.config:RayConfig",
                               description="the Ray cluster to run on: address, runtime_env, loopback binding, timeouts"))
