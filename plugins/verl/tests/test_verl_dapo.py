"""DAPO as verl-recipe writes it: dynamic sampling and the overlong buffer map onto rl-core's keys, or are refused by name."""

from __future__ import annotations

import pytest

from rl_core.config.load import load_config, load_report
from rl_core.plan.checks import build_plan
from rl_core.plugins import get_registry

V = "actor_rollout_ref"
DAPO = ["algorithm.adv_estimator=grpo", "data.train_batch_size=4", "data.gen_batch_size=12", "data.max_response_length=64", f"{V}.rollout.n=2",
        "algorithm.filter_groups.enable=True", "algorithm.filter_groups.metric=acc", "algorithm.filter_groups.max_num_gen_batches=10"]


def _errors(*overrides):
    return [p for p in load_report(None, list(overrides)).problems if p.severity == "error"]


def _check_errors(*overrides):
    """The errors `rlcore check` reports (loading, then the plan's checks: rl-algorithms' DAPO checks among them)."""
    return build_plan(load_report(None, list(overrides)), get_registry(), devices=False).errors


@pytest.mark.parametrize("prefix", ["+reward_model.reward_kwargs.overlong_buffer_cfg", "reward.reward_kwargs.overlong_buffer_cfg", "reward_model.overlong_buffer"])
def test_dapo_keys_map(prefix):
    kwargs = "reward" if prefix.startswith("reward.") else "+reward_model"
    cfg = load_config(None, [*DAPO, f"{prefix}.enable=True", f"{prefix}.len=16", f"{prefix}.penalty_factor=0.5", f"{prefix}.log=True",
                             f"{kwargs}.reward_kwargs.max_resp_len=48"])
    f, o = cfg.algorithm.filter_groups, cfg.reward.overlong_penalty
    assert (f.enable, f.metric, f.max_num_gen_batches, cfg.data.gen_batch_size) == (True, "acc", 10, 12)
    assert (o.enable, o.buffer_length, o.penalty_factor, o.log, o.max_response_length) == (True, 16, 0.5, True, 48)
    assert cfg.reward.kwargs == {}  # max_resp_len is the penalty's, not passed to the reward function


def test_dapo_yaml_defaults_are_accepted_off():
    # dapo_trainer.yaml's own defaults: len 0 and metric null while off
    cfg = load_config(None, ["reward.reward_kwargs.overlong_buffer_cfg.enable=False", "reward.reward_kwargs.overlong_buffer_cfg.len=0",
                             "algorithm.filter_groups.enable=False", "algorithm.filter_groups.metric=null", "data.gen_batch_size=8", "data.train_batch_size=8"])
    assert not cfg.reward.overlong_penalty.enable and cfg.reward.overlong_penalty.buffer_length is None


@pytest.mark.parametrize("overrides, key, words", [
    (["algorithm.filter_groups.enable=True"], "algorithm.filter_groups.metric", "is not set"),
    ([*DAPO, "algorithm.filter_groups.metric=seq_final_reward", "algorithm.use_kl_in_reward=True"], "algorithm.filter_groups.metric", "rl-core filters before"),
    (["data.gen_batch_size=16", "data.train_batch_size=8"], "data.gen_batch_size", "only dynamic sampling"),
    ([*DAPO, "rollout.n_gpus_per_node=1"], "algorithm.filter_groups.enable", "synchronous loop only"),
    (["reward.reward_kwargs.overlong_buffer_cfg.enable=True"], "reward.reward_kwargs.overlong_buffer_cfg.enable", "buffer_length"),
    (["reward.overlong_penalty.enable=true", "reward.overlong_penalty.buffer_length=600", "data.max_response_length=512"], "reward.overlong_penalty.buffer_length", "longer than"),
    (["algorithm.filter_groups.threshold=1"], "algorithm.filter_groups.threshold", "verl feature rl-core does not have"),
])
def test_dapo_refusals_name_the_key(overrides, key, words):
    problems = _check_errors(*overrides)
    assert problems, overrides
    assert any(words in p.what + p.fix for p in problems), [p.render() for p in problems]


def test_verl_profile_puts_several_nodes_on_ray():
    assert load_config(None, [f"{V}.rollout.n=2", "trainer.nnodes=2"], profile="verl").trainer.placement == "ray"
    assert load_config(None, [f"{V}.rollout.n=2", "trainer.nnodes=1"], profile="verl").trainer.placement == "local"
    assert load_config(None, ["rollout.n=2", "trainer.nnodes=2"], profile="rl-core").trainer.placement == "local"


def test_gen_batch_size_without_dynamic_sampling_is_the_step_batch_as_in_verl():
    loaded = load_report(None, [f"{V}.rollout.n=2", "data.gen_batch_size=48", "data.train_batch_size=16", "algorithm.filter_groups.enable=False"],
                         profile="verl")
    assert loaded.config.data.train_batch_size == 48 and loaded.config.data.gen_batch_size is None
    (w,) = [p for p in loaded.problems if p.key == "data.gen_batch_size"]
    assert w.severity == "warning" and "verl trains each step on all 48 generated prompts" in w.what


def test_more_verl_keys_map_or_are_refused_by_name():
    cfg = load_config(None, [f"+{V}.actor.fsdp_config.mixed_precision.reduce_dtype=bf16", f"{V}.actor.ppo_micro_batch_size=null",
                             f"{V}.rollout.log_prob_micro_batch_size=null"])
    assert cfg.actor.fsdp_config.reduce_dtype == "bfloat16"
    (p,) = _errors(f"{V}.rollout.log_prob_micro_batch_size=8")
    assert "global micro-batch size" in p.what and "log_prob_micro_batch_size_per_gpu" in p.fix
    (p,) = _errors("algorithm.rollout_correction.rollout_rs_threshold_lower=0.99")
    assert "LOWER_UPPER" in p.fix


def test_the_megatron_backend_refuses_an_fsdp_reduce_dtype():
    plugin = pytest.importorskip("rl_train_megatron.plugin", reason="needs the rl-train-megatron plugin")
    (p,) = plugin.check_unsupported_options(load_config(None, ["actor.fsdp_config.reduce_dtype=bfloat16"]))
    assert p.key == "actor.fsdp_config.reduce_dtype" and "reduces gradients in float32" in p.what
    assert plugin.check_unsupported_options(load_config(None, [])) == []


def test_the_training_set_must_hold_one_generation_round(tmp_path):
    from rl_core.plan.probes import data_size_problems

    data = tmp_path / "train.jsonl"
    data.write_text('{"prompt": "x"}\n' * 10)
    base = [f"data.train_files=[{data}]", "data.train_batch_size=4", "algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=acc"]
    assert data_size_problems(load_config(None, [*base, "data.gen_batch_size=8"])) == []
    (p,) = data_size_problems(load_config(None, [*base, "data.gen_batch_size=12"]))
    assert p.key == "data.gen_batch_size" and "has 10 row(s)" in p.what
