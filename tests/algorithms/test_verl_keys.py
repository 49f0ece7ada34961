"""verl's keys for the losses, estimators and rollout correction load onto rl-core's config."""

from __future__ import annotations

import pytest
import yaml
from rl_core.config.load import load_config
from rl_core.problems import ConfigError

VERL_RUN = {
    "actor_rollout_ref": {
        "actor": {
            "policy_loss": {"loss_mode": "kl_cov", "kl_cov_ratio": 0.01, "ppo_kl_coef": 0.5},
            "tau_pos": 2.0, "loss_agg_mode": "token-sum", "loss_scale_factor": 512, "kl_loss_type": "low_var_kl+",
        },
        "rollout": {"calculate_log_probs": True},
    },
    "algorithm": {
        "adv_estimator": "grpo_passk",
        "rollout_correction": {"rollout_is": "sequence", "rollout_is_threshold": "0.5_5.0", "rollout_rs": "seq_mean_k1",
                               "rollout_rs_threshold": "0.9_1.1", "rollout_is_batch_normalize": True},
    },
    "model": {"path": "unused"},
}


def _write(tmp_path, data):
    path = tmp_path / "verl.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_verl_keys_load(tmp_path):
    c = load_config(_write(tmp_path, VERL_RUN))
    assert c.actor.policy_loss == "kl_cov"
    assert c.actor.policy_loss_options == {"kl_cov_ratio": 0.01, "ppo_kl_coef": 0.5, "tau_pos": 2.0}
    assert (c.actor.loss_agg_mode, c.actor.loss_scale_factor, c.actor.kl_loss_type) == ("token-sum", 512, "low_var_kl+")
    rc = c.algorithm.rollout_correction
    assert (rc.rollout_is, rc.rollout_is_threshold, rc.rollout_rs, rc.rollout_rs_threshold) == ("sequence", "0.5_5.0", "seq_mean_k1", "0.9_1.1")
    assert rc.rollout_is_batch_normalize is True and c.rollout.calculate_log_probs is True


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
