"""verl's keys in rl-core's other features' tests, moved here with the dialect (from tests/core/test_config_load.py,
tests/core/test_profiling.py, tests/algorithms/test_verl_keys.py and tests/infra/test_custom_dataset.py): a native
launch (a YAML file, key=value) writing verl's keys gets them translated."""

from __future__ import annotations

import yaml

from rl_core.config.load import load_config, load_report
from rl_core.plan.checks import build_plan
from rl_core.plugins import get_registry
from rl_core.problems import errors
from rl_data.testing import write_dataset_class  # rl-data's dataset class of its own tests (data.custom_cls)


def _write(tmp_path, data):
    path = tmp_path / "verl.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _problems(*overrides, path=None):
    return load_report(path, list(overrides)).problems


def test_verl_keys_are_translated():
    cfg = load_config(None, ["actor_rollout_ref.rollout.n=5", "actor_rollout_ref.actor.ppo_mini_batch_size=4", "trainer.default_local_dir=/tmp/x"])
    assert cfg.rollout.n == 5 and cfg.actor.ppo_mini_batch_size == 4 and cfg.trainer.output_dir == "/tmp/x"
    cfg = load_config(None, ["actor_rollout_ref.actor.strategy=megatron", "actor_rollout_ref.rollout.response_length=64", "actor_rollout_ref.actor.grad_clip=0.5"])
    assert cfg.train.name == "megatron" and cfg.data.max_response_length == 64 and cfg.actor.optim.grad_clip == 0.5


def test_verl_yaml_layout_is_translated(tmp_path):
    f = tmp_path / "verl.yaml"
    f.write_text("actor_rollout_ref:\n  actor:\n    ppo_epochs: 2\n  rollout:\n    temperature: 0.6\n")
    cfg = load_config(f)
    assert cfg.actor.ppo_epochs == 2 and cfg.rollout.temperature == 0.6


def test_verl_ray_init_keys_are_translated(tmp_path):
    f = tmp_path / "verl.yaml"
    f.write_text("ray_kwargs:\n  ray_init:\n    num_cpus: 8\n    runtime_env: {env_vars: {A: '1'}}\n")
    cfg = load_config(f, ["ray_kwargs.ray_init.address=auto"])
    assert cfg.ray.num_cpus == 8 and cfg.ray.runtime_env == {"env_vars": {"A": "1"}} and cfg.ray.address == "auto"
    assert load_config(None, ["ray_init.num_cpus=4"]).ray.num_cpus == 4  # older verl
    (p,) = _problems("ray_kwargs.ray_init.num_gpus=2")  # no counterpart: named as written, ours beside it
    assert p.key == "ray_kwargs.ray_init.num_gpus" and "rl-core's ray.num_gpus" in p.what



def test_nsys_verl_keys():
    from rl_core.config.load import load_report

    loaded = load_report(None, ["global_profiler.tool=nsys", "global_profiler.steps=[1]", "global_profiler.global_tool_config.nsys.discrete=true",
                                "trainer.device=cuda"])
    assert (loaded.config.profiler.tool, loaded.config.profiler.discrete) == ("nsys", True)
    ray_nsight = load_report(None, ["global_profiler.tool=nsys", "trainer.device=cuda", "+global_profiler.global_tool_config.nsys.worker_nsight_options.trace=cuda"])
    assert [p.key for p in ray_nsight.as_written(ray_nsight.problems) if p.severity == "error"] == [
        "+global_profiler.global_tool_config.nsys.worker_nsight_options.trace"]

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


def test_verl_keys_load(tmp_path):
    c = load_config(_write(tmp_path, VERL_RUN))
    assert c.actor.policy_loss == "kl_cov"
    assert c.actor.policy_loss_options == {"kl_cov_ratio": 0.01, "ppo_kl_coef": 0.5, "tau_pos": 2.0}
    assert (c.actor.loss_agg_mode, c.actor.loss_scale_factor, c.actor.kl_loss_type) == ("token-sum", 512, "low_var_kl+")
    rc = c.algorithm.rollout_correction
    assert (rc.rollout_is, rc.rollout_is_threshold, rc.rollout_rs, rc.rollout_rs_threshold) == ("sequence", "0.5_5.0", "seq_mean_k1", "0.9_1.1")
    assert rc.rollout_is_batch_normalize is True and c.rollout.calculate_log_probs is True


def test_verl_keys_map_and_a_lone_key_is_refused(tmp_path):
    code, data = write_dataset_class(tmp_path)
    base = ["algorithm.adv_estimator=grpo", "actor_rollout_ref.model.path=builtin:smollm2", f"data.train_files=['{data}']"]
    loaded = load_report(None, [*base, f"data.custom_cls.path={code}", "data.custom_cls.name=Lines"])
    assert not errors(loaded.problems)
    assert (loaded.config.data.custom_cls.path, loaded.config.data.custom_cls.name) == (code, "Lines")
    loaded = load_report(None, [*base, f"data.custom_cls.path={code}"])  # rl-data's check (core's load-time rule until session 21)
    assert [p.key for p in build_plan(loaded, get_registry(), devices=False).errors] == ["data.custom_cls.name"]
