"""The built-in algorithms are registered through the public hooks, with their declared needs."""

import inspect

import pytest
from rl_core.plugins import get_registry

ESTIMATORS = {
    # name: (needs_critic, needs_groups, needs_greedy_baseline)
    "gae": (True, False, False),
    "grpo": (False, True, False),
}
POLICY_LOSSES = ["ppo_clip", "dual_clip", "vanilla"]  # the others come with rl-algorithms (plugins/algorithms)

ESTIMATOR_PARAMS = ["token_level_rewards", "response_mask", "index", "values", "gamma", "lam", "baseline_rewards", "options"]
POLICY_LOSS_PARAMS = ["old_log_prob", "log_prob", "advantages", "response_mask", "loss_agg_mode", "clip_ratio",
                      "clip_ratio_low", "clip_ratio_high", "clip_ratio_c", "options", "rollout_is_weights"]


@pytest.fixture(scope="module")
def registry():
    return get_registry(reload=True)


def test_builtin_plugin_loaded_cleanly(registry):
    assert not [e for e in registry.errors if e.distribution == "rl-core"], registry.errors
    assert any(p["entry_point"] == "builtin_algorithms" for p in registry.plugins)


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_estimator_cards(registry, name):
    card = registry.get("estimator", name)
    assert (card.needs_critic, card.needs_groups, card.needs_greedy_baseline) == ESTIMATORS[name]
    assert card.provider.distribution == "rl-core"
    assert card.factory == f"rl_core.algorithms.advantages:{name}"  # lazy dotted path
    params = inspect.signature(card.load()).parameters
    assert list(params) == ESTIMATOR_PARAMS
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params.values())


@pytest.mark.parametrize("name", sorted(POLICY_LOSSES))
def test_policy_loss_cards(registry, name):
    card = registry.get("policy_loss", name)
    assert card.provider.distribution == "rl-core" and card.skips_zero_advantage  # A * f(ratio): zero-advantage rows carry no gradient
    params = inspect.signature(card.load()).parameters
    assert list(params) == POLICY_LOSS_PARAMS
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params.values())


def test_all_builtins_listed(registry):
    assert set(ESTIMATORS) <= set(registry.names("estimator"))
    assert set(POLICY_LOSSES) <= set(registry.names("policy_loss"))


def test_builtin_module_does_not_import_torch():
    import subprocess
    import sys

    # the entry point must stay light: it may not add torch to what rl_core.cards already imports
    code = (
        "import sys, rl_core.cards; before = 'torch' in sys.modules; "
        "import rl_core.algorithms.builtin; print(before, 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    before, after = out.stdout.split()
    assert after == before
