"""Plugin loading: third-party distributions, broken plugins, conflicts, allow/block lists."""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest
from rl_core import hookimpl
from rl_core.cards import EstimatorCard, Provider, RewardCard
from rl_core.plugins import PluginManager

from tests.conftest import REPO, pip_install_target, run_rlcore

FIXTURES = REPO / "tests" / "fixtures"
TINY_DATA = f"data.train_files={FIXTURES / 'data' / 'tiny_gsm8k.jsonl'}"  # `check` reads the data's first rows


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The third-party and the broken distributions, really pip-installed into one folder."""
    target = tmp_path_factory.mktemp("site")
    pip_install_target(FIXTURES / "thirdparty", target)
    pip_install_target(FIXTURES / "broken", target)
    assert list(target.glob("rl_thirdparty_example-0.3.1.dist-info"))
    return target


def test_third_party_plugin_is_listed_with_its_distribution(site):
    res = run_rlcore("plugins", "--json", pythonpath=[site], env={"RL_CORE_BLOCK_PLUGINS": "broken_plugin"})
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    by_name = {(c["kind"], c["name"]): c for c in report["cards"]}
    reward = by_name[("reward", "exact_match")]
    est = by_name[("estimator", "mean_baseline")]
    for card in (reward, est):
        assert card["distribution"] == "rl-thirdparty-example"
        assert card["version"] == "0.3.1"
        assert card["entry_point"] == "thirdparty_example"
    assert reward["capabilities"]["data_sources"] == ["thirdparty/exact"]
    reward_model = by_name[("reward_model", "char_count")]  # a model-based scorer shipped by entry point
    assert reward_model["distribution"] == "rl-thirdparty-example" and reward_model["entry_point"] == "thirdparty_example"
    assert report["errors"] == []


def test_third_party_names_resolve_in_a_config(site):
    res = run_rlcore(
        "check", "model.path=Qwen/Qwen2.5-0.5B", TINY_DATA, "reward.name=exact_match", "algorithm.adv_estimator=mean_baseline", "rollout.n=1",
        "reward_model.enable=true", "reward_model.name=char_count", f"reward_model.model.path={FIXTURES}",
        "reward.weights={default: {rule: 1.0, model: 0.5}}",
        pythonpath=[site], env={"RL_CORE_BLOCK_PLUGINS": "broken_plugin"},
    )
    assert res.returncode == 0, res.stderr
    assert "mean_baseline" in res.stdout and "(rl-thirdparty-example 0.3.1)" in res.stdout
    assert "exact_match" in res.stdout


def test_broken_plugin_is_named_and_the_rest_still_listed(site):
    res = run_rlcore("plugins", pythonpath=[site])
    assert res.returncode == 1
    assert "rl-broken-plugin 0.0.7" in res.stdout
    assert "'broken_plugin'" in res.stdout
    assert "ImportError: libfancy.so: cannot open shared object file (simulated)" in res.stdout
    assert "exact_match" in res.stdout and "rl-thirdparty-example" in res.stdout
    assert "Traceback" not in res.stdout + res.stderr


def test_broken_plugin_is_named_by_check_which_still_resolves(site):
    res = run_rlcore("check", "model.path=Qwen/Qwen2.5-0.5B", TINY_DATA, "reward.name=exact_match", pythonpath=[site])
    assert "rl-broken-plugin 0.0.7" in res.stderr and "broken_plugin" in res.stderr and "ImportError" in res.stderr
    assert "exact_match" in res.stdout
    assert "Traceback" not in res.stdout + res.stderr
    assert res.returncode == 0


def test_allow_list_skips_others(site):
    res = run_rlcore("plugins", "--json", pythonpath=[site], env={"RL_CORE_PLUGINS": "rl-thirdparty-example"})
    report = json.loads(res.stdout)
    assert report["errors"] == []  # the broken one was not loaded
    names = {c["name"] for c in report["cards"]}
    assert "exact_match" in names


def _plugin(**hooks) -> types.SimpleNamespace:
    return types.SimpleNamespace(**{k: hookimpl(v) for k, v in hooks.items()})


def test_duplicate_names_are_an_error_naming_both():
    def reg_a(register):
        register(RewardCard(name="dup", factory="x:y"))

    def reg_b(register):
        register(RewardCard(name="dup", factory="x:z"))

    pm = PluginManager()
    pm.register_module(_plugin(rl_core_register_rewards=reg_a), Provider(distribution="dist-a", version="1", entry_point="a"))
    pm.register_module(_plugin(rl_core_register_rewards=reg_b), Provider(distribution="dist-b", version="2", entry_point="b"))
    registry = pm.build_registry()
    assert "dup" not in registry.names("reward")
    (conflict,) = registry.conflicts
    msg = conflict.describe()
    assert "dist-a 1" in msg and "dist-b 2" in msg
    with pytest.raises(LookupError, match="registered twice"):
        registry.get("reward", "dup")


def test_misspelt_hook_is_reported_not_ignored():
    def rl_core_register_reward(register):  # missing 's'
        pass

    pm = PluginManager()
    pm.register_module(_plugin(rl_core_register_reward=rl_core_register_reward), Provider(distribution="typo-dist", version="0.1", entry_point="typo"))
    (err,) = pm.errors
    assert err.distribution == "typo-dist" and "rl_core_register_reward" in err.error


def test_hook_that_raises_is_reported_and_others_kept():
    def bad(register):
        raise RuntimeError("boom")

    def good(register):
        register(EstimatorCard(name="fine", factory="x:y"))

    pm = PluginManager()
    pm.register_module(_plugin(rl_core_register_rewards=bad), Provider(distribution="bad-dist", version="1", entry_point="bad"))
    pm.register_module(_plugin(rl_core_register_advantage_estimators=good), Provider(distribution="good-dist", version="1", entry_point="good"))
    registry = pm.build_registry()
    assert registry.names("estimator") == ["fine"]
    (err,) = registry.errors
    assert err.distribution == "bad-dist" and "RuntimeError: boom" in err.error


def test_registering_something_that_is_not_a_card_is_reported():
    def wrong(register):
        register({"name": "x"})

    pm = PluginManager()
    pm.register_module(_plugin(rl_core_register_rewards=wrong), Provider(distribution="odd", version="1", entry_point="odd"))
    registry = pm.build_registry()
    assert "expects a card" in registry.errors[0].error


def test_a_missing_engine_is_installed_at_its_tested_version(monkeypatch):
    """The fix names the version the card was tested with (a bare `pip install X` may fetch an untested one)."""
    import importlib.metadata as md

    import rl_core.plan.resolver as resolver
    from rl_core.cards import RolloutCard, TrainCard

    def missing(dist):
        raise md.PackageNotFoundError(dist)

    monkeypatch.setattr(resolver.md, "version", missing)
    one = resolver.engine_version_problem(TrainCard(name="m", factory="x:y", engine="megatron-core", engine_versions=">=0.16,<0.17"), "train.name")
    assert one.fix == "pip install 'megatron-core>=0.16,<0.17'"
    two = resolver.engine_version_problem(RolloutCard(name="v", factory="x:y", engine="eng|eng-cpu", engine_versions="==1.*||==2.*"), "rollout.name")
    assert two.fix == "pip install eng (or eng-cpu on CPU)"
    own = resolver.engine_version_problem(RolloutCard(name="v", factory="x:y", engine="eng", engine_install="see the README"), "rollout.name")
    assert own.fix == "see the README" and "needs the engine eng, which is not installed" in own.what
