"""verl's keys for the losses, estimators and rollout correction load onto rl-core's config."""

from __future__ import annotations

import pytest
import yaml
from rl_core.config.load import load_config
from rl_core.problems import ConfigError

def _write(tmp_path, data):
    path = tmp_path / "verl.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_verl_defaults():
    from rl_core.config.schema import RunConfig

    c = RunConfig()
    assert c.actor.policy_loss == "vanilla" and c.actor.clip_ratio_c == 3.0 and c.actor.loss_agg_mode == "token-mean"
    assert c.algorithm.rollout_correction.rollout_is is None and c.algorithm.rollout_correction.rollout_is_threshold == 2.0


@pytest.mark.parametrize("key,value", [
    ("rollout_is", "tokens"), ("bypass_mode", True), ("loss_type", "reinforce"),
])
def test_bad_rollout_correction_keys_are_refused(tmp_path, key, value):
    data = {"algorithm": {"rollout_correction": {key: value}}, "model": {"path": "unused"}}
    with pytest.raises(ConfigError, match=f"algorithm.rollout_correction.{key}"):
        load_config(_write(tmp_path, data))
