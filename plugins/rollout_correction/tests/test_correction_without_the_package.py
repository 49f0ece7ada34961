"""Without rl-rollout-correction (blocked: RL_CORE_BLOCK_PLUGINS): a config that sets its keys is an `rlcore check`
error naming `pip install rl-rollout-correction`; one that does not resolves, and its Plan has no correction."""

from __future__ import annotations

import pytest
from rl_core.cli.main import main
from rl_core.config.load import load_config
from rl_core.plan.resolver import resolve
from rl_core.trainer.loop import rollout_correction_of
from rl_core_testing.blocked_plugins import blocked_plugins
from rl_core_testing.tiny_run import write_tiny_run


@pytest.fixture
def blocked():
    with blocked_plugins("rl-rollout-correction"):
        yield


@pytest.mark.parametrize("key", ["algorithm.rollout_correction.rollout_is=token", "rollout.mismatch.max_abs_diff=0.5",
                                 "rollout.precision=fp8"])
def test_its_keys_name_the_package(tmp_path, blocked, capsys, key):
    run = write_tiny_run(tmp_path)
    assert main(["check", str(run), key, "--skip-device-check"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and key.split("=")[0].rsplit(".", 1)[0] in err and "pip install rl-rollout-correction" in err, err


def test_a_config_without_them_resolves_without_a_correction(tmp_path, blocked):
    plan, problems = resolve(load_config(write_tiny_run(tmp_path)))
    assert plan is not None, [p.render() for p in problems]
    assert rollout_correction_of(plan) is None and "rollout_correction" not in plan.features
    assert not hasattr(plan.config.algorithm, "rollout_correction") and not hasattr(plan.config.rollout, "mismatch")


def test_installed_it_is_the_plan_s_feature(tmp_path):
    plan, problems = resolve(load_config(write_tiny_run(tmp_path)))
    assert plan is not None and rollout_correction_of(plan) is not None, [p.render() for p in problems]
