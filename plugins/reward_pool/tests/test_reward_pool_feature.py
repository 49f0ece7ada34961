"""rl-reward-pool's card: the reward manager gets its pool from the installed ``reward_pool`` feature (the plan's, or a
registry's), and without the package ``reward.num_workers > 0`` is a check problem / an error naming the install."""

from __future__ import annotations

import pytest
from rl_core.config.load import load_config
from rl_core.config.schema import RewardConfig
from rl_core.plan.features import Features, load_features, missing_feature_problems
from rl_core.plugins import Registry, get_registry
from rl_core.rewards.manager import RewardManager
from rl_core.rewards.scoring import RewardConfigError

from rl_reward_pool.plugin import enabled
from rl_reward_pool.pool import ScorerPool


def test_the_feature_is_on_with_workers_and_provides_the_pool():
    features = load_features(get_registry(), problems := [])
    assert problems == [] and features.get("reward_pool") is ScorerPool
    assert enabled(load_config(None, ["reward.num_workers=2"])) and not enabled(load_config(None, []))
    manager = RewardManager.for_stack(type("Stack", (), {"config": load_config(None, ["reward.num_workers=2"]), "features": features,
                                                         "reward_cards": (), "reward": None, "reward_fn": None, "plugin_errors": ()})())
    try:
        assert isinstance(manager.pool, ScorerPool) and manager.pool.num_workers == 2
    finally:
        manager.close()


def test_without_the_package_workers_name_the_install():
    on = load_config(None, ["reward.num_workers=2"])
    (p,) = missing_feature_problems(on, Features())
    assert p.key == "reward.num_workers" and "is 2" in p.what and "pip install rl-reward-pool" in p.fix and "reward.num_workers=0" in p.fix
    assert missing_feature_problems(on, load_features(get_registry(), [])) == []  # installed: its card lists the key
    assert missing_feature_problems(load_config(None, []), Features()) == []  # in-process: nothing needed
    with pytest.raises(RewardConfigError, match="pip install rl-reward-pool"):
        RewardManager(RewardConfig(num_workers=2), Registry())
    RewardManager(RewardConfig(num_workers=0), Registry()).close()  # in-process needs no pool


@pytest.fixture
def env(monkeypatch):
    yield monkeypatch
    monkeypatch.undo()
    get_registry(reload=True)


def test_rlcore_check_without_the_package_names_the_install(tmp_path, env, capsys):
    from rl_core.cli.main import main
    from rl_core_testing.tiny_run import write_tiny_run

    config = write_tiny_run(tmp_path, **{"reward.num_workers": 2})
    env.setenv("RL_CORE_BLOCK_PLUGINS", "rl-reward-pool")
    get_registry(reload=True)
    assert main(["check", str(config), "--skip-device-check"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "reward.num_workers" in err and "pip install rl-reward-pool" in err, err
