"""rl-algorithms registers its estimators, losses, reward shaper and batch sampler through rl-core's public hooks."""

import inspect

import pytest
from rl_core.plugins import get_registry

from tests.algorithms.test_builtin_registry import ESTIMATOR_PARAMS, POLICY_LOSS_PARAMS

ESTIMATORS = {
    # name: (factory, needs_groups, needs_greedy_baseline)
    "rloo": ("rl_algorithms.estimators:rloo", True, False),
    "reinforce_plus_plus": ("rl_algorithms.estimators:reinforce_plus_plus", False, False),
    "reinforce_plus_plus_baseline": ("rl_algorithms.estimators:reinforce_plus_plus_baseline", True, False),
    "remax": ("rl_algorithms.estimators:remax", False, True),
    "opo": ("rl_algorithms.group_baselines:opo", True, False),
    "grpo_passk": ("rl_algorithms.group_baselines:grpo_passk", True, False),
    "gpg": ("rl_algorithms.group_baselines:gpg", True, False),
    "rloo_vectorized": ("rl_algorithms.group_baselines:rloo_vectorized", True, False),
    "grpo_vectorized": ("rl_core.algorithms.advantages:grpo", True, False),  # verl's name for grpo
}
# loss -> whether its loss and gradient vanish with the advantage (zero-advantage rows may be left out)
POLICY_LOSSES = {"gspo": True, "gpg": True, "cispo": True, "dro": False, "sapo": False, "geo_mean": False, "dppo_tv": False,
                 "dppo_kl": False, "clip_cov": False, "kl_cov": False}


@pytest.fixture(scope="module")
def registry():
    return get_registry(reload=True)


def test_loaded_cleanly(registry):
    assert not [e for e in registry.errors if e.distribution == "rl-algorithms"], registry.errors
    assert any(p["entry_point"] == "algorithms" for p in registry.plugins)


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_estimator_cards(registry, name):
    card = registry.get("estimator", name)
    factory, groups, greedy = ESTIMATORS[name]
    assert (card.factory, card.needs_groups, card.needs_greedy_baseline, card.needs_critic) == (factory, groups, greedy, False)
    assert card.provider.distribution == "rl-algorithms"
    params = inspect.signature(card.load()).parameters
    if name == "rloo_vectorized":  # rloo's arguments, passed on
        assert [p.kind for p in params.values()] == [inspect.Parameter.VAR_KEYWORD]
        return
    assert list(params) == ESTIMATOR_PARAMS and all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params.values())


@pytest.mark.parametrize("name", sorted(POLICY_LOSSES))
def test_policy_loss_cards(registry, name):
    card = registry.get("policy_loss", name)
    assert card.provider.distribution == "rl-algorithms" and card.skips_zero_advantage == POLICY_LOSSES[name]
    params = inspect.signature(card.load()).parameters
    assert list(params) == POLICY_LOSS_PARAMS and all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params.values())


def test_dapo_hooks(registry):
    (shaper,) = registry.cards["reward_shaping"].values()
    (sampler,) = registry.cards["batch_sampler"].values()
    assert (shaper.name, shaper.enabled_by) == ("overlong_penalty", "reward.overlong_penalty.enable")
    assert (sampler.name, sampler.enabled_by) == ("dynamic_sampling", "algorithm.filter_groups.enable")
    assert {"overlong_penalty", "filter_groups"} <= set(registry.cards["check"])


def test_plugin_module_does_not_import_torch():
    import subprocess
    import sys

    code = "import sys, rl_core.cards; before = 'torch' in sys.modules; import rl_algorithms.plugin; print(before, 'torch' in sys.modules)"
    before, after = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert after == before
