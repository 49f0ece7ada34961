"""A config naming rl-algorithms' estimators, losses or DAPO features on an rl-core without the package: `rlcore check`
names the key and `pip install rl-algorithms`, never a traceback; with the package the same config resolves."""

from __future__ import annotations

import attrs
import pytest
from rl_core.config.load import load_config
from rl_core.plan.checks import plan_for
from rl_core.plugins import get_registry
from rl_core_testing.tiny_run import write_tiny_run

DAPO = dict(algorithm__filter_groups={"enable": True, "metric": "acc"}, reward__overlong_penalty={"enable": True, "buffer_length": 4})


def _without_the_package():
    """The installed registry less every card rl-algorithms registered (as if it were not installed)."""
    base = get_registry()
    cards = {kind: {n: c for n, c in table.items() if c.provider is None or c.provider.distribution != "rl-algorithms"}
             for kind, table in base.cards.items()}
    return attrs.evolve(base, cards=cards)


@pytest.mark.parametrize("overrides, key", [
    (dict(algorithm__adv_estimator="rloo"), "algorithm.adv_estimator"),
    (dict(actor__policy_loss="gspo"), "actor.policy_loss"),
    (DAPO, "algorithm.filter_groups.enable"),
    (DAPO, "reward.overlong_penalty.enable"),
])
def test_each_key_names_the_package(tmp_path, overrides, key):
    config = load_config(write_tiny_run(tmp_path, **overrides))
    plan, problems = plan_for(config, _without_the_package(), devices=False)
    assert plan is None
    (p,) = [p for p in problems if p.key == key]
    assert p.severity == "error" and "pip install rl-algorithms" in p.what + p.fix, p.render()
    plan, problems = plan_for(config, get_registry(), devices=False)
    assert plan is not None, [p.render() for p in problems if p.severity == "error"]


def test_the_plan_holds_the_hooks_the_config_turns_on(tmp_path):
    plan, _ = plan_for(load_config(write_tiny_run(tmp_path, **DAPO)), devices=False)
    assert [c.name for c, _ in plan.reward_shapers] == ["overlong_penalty"] and plan.batch_sampler[0].name == "dynamic_sampling"
    plan, _ = plan_for(load_config(write_tiny_run(tmp_path)), devices=False)
    assert plan.reward_shapers == () and plan.batch_sampler is None
