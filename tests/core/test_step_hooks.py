"""The step hooks a config turns on (rl_core.plan.step_hooks): reward shapers and the batch sampler, from their cards'
``enabled_by`` keys; a key no installed card claims names the package; two samplers at once are refused."""

from __future__ import annotations

from rl_core.cards import BatchSamplerCard, Provider, RewardShapingCard
from rl_core.config.load import load_config
from rl_core.plan.step_hooks import step_hooks
from rl_core.util.user_paths import get_key
from rl_core.plugins import Registry

P = Provider(distribution="third-party")


def make_shaper(config):  # the factories the plan loads (never called here)
    return None


def _registry(*cards) -> Registry:
    registry = Registry()
    for card in cards:
        registry.add(card, P)
    return registry


def test_only_the_cards_whose_key_is_true_are_in_the_plan_in_name_order():
    cfg = load_config(None, ["reward.overlong_penalty.enable=true", "reward.overlong_penalty.buffer_length=8"])
    on = RewardShapingCard(name="b", enabled_by="reward.overlong_penalty.enable", factory=make_shaper)
    also_on = RewardShapingCard(name="a", enabled_by="reward.overlong_penalty.enable", factory=make_shaper)
    off = BatchSamplerCard(name="c", enabled_by="algorithm.filter_groups.enable", factory=make_shaper)
    shapers, sampler, problems = step_hooks(cfg, _registry(on, also_on, off))
    assert [(c.name, fn) for c, fn in shapers] == [("a", make_shaper), ("b", make_shaper)] and sampler is None and problems == []


def test_a_key_no_installed_card_claims_names_the_package():
    cfg = load_config(None, ["algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=acc"])
    shapers, sampler, problems = step_hooks(cfg, _registry())
    (p,) = problems
    assert p.key == "algorithm.filter_groups.enable" and "pip install rl-algorithms" in p.fix and (shapers, sampler) == ((), None)
    assert step_hooks(load_config(None, []), _registry())[2] == []  # off: nothing to say


def test_two_samplers_and_a_factory_that_does_not_load_are_problems():
    cfg = load_config(None, ["algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=acc", "reward.overlong_penalty.enable=true",
                             "reward.overlong_penalty.buffer_length=8"])
    first = BatchSamplerCard(name="a", enabled_by="algorithm.filter_groups.enable", factory=make_shaper)
    second = BatchSamplerCard(name="b", enabled_by="reward.overlong_penalty.enable", factory=make_shaper)
    broken = RewardShapingCard(name="broken", enabled_by="reward.overlong_penalty.enable", factory="no_such_module_xyz:make")
    shapers, sampler, problems = step_hooks(cfg, _registry(first, second, broken))
    assert shapers == () and sampler[0].name == "a"
    assert any("does not load" in p.what and "third-party" in p.what for p in problems)
    assert any("a second batch sampler" in p.what for p in problems)


def test_get_key_reads_a_dotted_key():
    cfg = load_config(None, ["data.max_response_length=64"])
    assert get_key(cfg, "data.max_response_length") == 64 and get_key(cfg, "data.no_such_key") is None
