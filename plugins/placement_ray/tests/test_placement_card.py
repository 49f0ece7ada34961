"""The ``ray`` placement card: registered by rl-placement-ray, resolved once into the Plan, its RayCluster keeping the
placement protocol (without the distribution, tests/core/test_placement_contract.py: ``rlcore check`` names
``pip install rl-placement-ray``)."""

from __future__ import annotations

import inspect

import attrs
import pytest
from rl_core.config.load import load_config
from rl_core.placement.contract import Placement
from rl_core.plan.resolver import resolve
from rl_core.plugins import get_registry
from rl_core_testing.tiny_run import write_tiny_run
from rl_placement_ray.cluster import RayCluster


@pytest.mark.parametrize("name", ["submit", "call", "close"])
def test_ray_cluster_has_the_protocols_methods(name):
    ours, theirs = inspect.signature(getattr(RayCluster, name)), inspect.signature(getattr(Placement, name))
    assert list(ours.parameters) == list(theirs.parameters), f"RayCluster.{name}{ours} != Placement.{name}{theirs}"


def test_the_card_is_registered_by_this_distribution():
    card = get_registry().get("placement", "ray")
    assert card.provider.distribution == "rl-placement-ray"
    assert card.load() is RayCluster  # built as RayCluster(plan, roles=..., pool=...)
    assert list(inspect.signature(RayCluster).parameters)[:1] == ["stack"] and {"roles", "pool"} <= set(inspect.signature(RayCluster).parameters)
    from rl_core.cards import load_object
    from rl_placement_ray.doctor import run

    assert load_object(card.doctor) is run  # `rlcore doctor --cluster`


def test_the_plan_carries_the_placement_card(tmp_path):
    cfg = write_tiny_run(tmp_path)
    local, problems = resolve(load_config(cfg))
    assert local is not None, [p.render() for p in problems]
    assert local.placement.name == "local" and local.placement.provider.distribution == "rl-core"
    ray, problems = resolve(load_config(cfg, ["trainer.placement=ray"]))
    assert ray is not None, [p.render() for p in problems]
    assert ray.placement is get_registry().get("placement", "ray")


def test_a_card_whose_factory_is_gone_is_a_check_problem(tmp_path):
    base = get_registry()
    broken = attrs.evolve(base.get("placement", "ray"), factory="rl_placement_ray.cluster:NoSuchCluster")
    registry = attrs.evolve(base, cards={**base.cards, "placement": {**base.cards["placement"], "ray": broken}})
    plan, problems = resolve(load_config(write_tiny_run(tmp_path), ["trainer.placement=ray"]), registry)
    assert plan is None
    (p,) = [p for p in problems if p.key == "trainer.placement"]
    assert "defines no 'NoSuchCluster'" in p.what and "rl-placement-ray" in p.fix
