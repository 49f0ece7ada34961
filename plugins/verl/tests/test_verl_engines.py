"""verl's veomni / fsdp_turbo / megatron-lite engines as names for rl-core's backends (rl_verl.engines):
each engine setting lands on rl-core's key with verl's meaning, speed knobs are warnings that name them, the rest is
refused by the key as written, and verl's own scripts for these engines resolve."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from rl_core.config.load import config_to_dict, load_report
from rl_verl.profile import get_dotted

HERE = Path(__file__).parent / "verl_scripts"
A = "actor_rollout_ref"
V = f"{A}.actor.veomni"
T = f"{A}.actor.fsdp_config.turbo_config"
E = f"{A}.actor.engine"
BASE = [f"{A}.model.path=m", "trainer.n_gpus_per_node=8"]


def _load(*overrides: str, profile: str | None = None):
    return load_report(None, [*BASE, *overrides], profile=profile)


def _errors(loaded):
    return [p for p in loaded.problems if p.severity == "error"]


def _value(loaded, key):
    assert not _errors(loaded), [p.render() for p in _errors(loaded)]
    return get_dotted(config_to_dict(loaded.config, mask=False), key)


@pytest.mark.parametrize(("overrides", "key", "want"), [
    (["model_engine=veomni"], "train.name", "fsdp"),
    ([f"{A}.actor.strategy=veomni", f"{A}.ref.strategy=veomni"], "train.name", "fsdp"),
    ([f"{A}.actor.strategy=fsdp_turbo", f"{A}.ref.strategy=fsdp_turbo"], "train.name", "fsdp"),
    ([f"actor@{A}.actor=mlite_actor"], "train.name", "megatron"),
    ([f"{V}.param_offload=True"], "actor.fsdp_config.param_offload", True),
    ([f"{V}.optimizer_offload=True"], "actor.fsdp_config.optimizer_offload", True),
    ([f"{V}.enable_fsdp_offload=True"], "actor.fsdp_config.offload_policy", True),
    ([f"{V}.ulysses_parallel_size=2"], "actor.ulysses_sequence_parallel_size", 2),
    # VeOmni shards a copy over fsdp_size x ulysses ranks of the world (8 here): HSDP of 2 x 2 = 4 ranks per copy
    ([f"{V}.ulysses_parallel_size=2", f"{V}.fsdp_size=2"], "actor.fsdp_config.fsdp_size", 4),
    ([f"{V}.ulysses_parallel_size=2", f"{V}.fsdp_size=4"], "actor.fsdp_config.fsdp_size", -1),  # 4 = world / ulysses: all ranks
    ([f"{V}.fsdp_size=-1"], "actor.fsdp_config.fsdp_size", -1),
    ([f"{V}.pad_to_length=True", f"{V}.pad_to_length_bucket=512"], "actor.fsdp_config.pad_to_length_bucket", 512),
    ([f"{A}.actor.optim.lr_min=1e-7"], "actor.optim.min_lr", 1e-7),
    # expert parallelism of the fsdp backend (rl_train_fsdp.experts); the reference's size ties to the actor's
    ([f"{V}.expert_parallel_size=8", f"{A}.ref.veomni.expert_parallel_size=8"], "train.expert_model_parallel_size", 8),
    ([f"{T}.distributed.expert_parallel_size=4", f"{A}.ref.fsdp_config.turbo_config.distributed.expert_parallel_size=4"],
     "train.expert_model_parallel_size", 4),
    ([f"{T}.distributed.fully_shard_parallel_size=4"], "actor.fsdp_config.fsdp_size", 4),
    ([f"{T}.distributed.fully_shard_parallel_size=16"], "actor.fsdp_config.fsdp_size", -1),  # more than the world: all ranks
    ([f"{T}.distributed.ulysses_parallel_size=2"], "actor.ulysses_sequence_parallel_size", 2),
    ([f"+{T}.distributed.fsdp_plan.reduce_dtype=bf16"], "actor.fsdp_config.reduce_dtype", "bfloat16"),
    # FSDP-Turbo recomputes its plan's modules whatever the model's switch says (verl's 27B script sets both)
    ([f"{A}.model.enable_gradient_checkpointing=False", f"+{T}.memory.recompute=True"], "model.enable_gradient_checkpointing", True),
    ([f"+{T}.memory.recompute=True", f"{A}.model.enable_gradient_checkpointing=False"], "model.enable_gradient_checkpointing", True),
    ([f"actor@{A}.actor=mlite_actor", f"{E}.tp=2"], "train.tensor_model_parallel_size", 2),
    ([f"actor@{A}.actor=mlite_actor", f"{E}.pp=2"], "train.pipeline_model_parallel_size", 2),
    ([f"actor@{A}.actor=mlite_actor", f"{E}.param_offload=True"], "train.options.param_offload", True),
    ([f"actor@{A}.actor=mlite_actor", f"{E}.grad_offload=True"], "train.options.grad_offload", True),
    # Megatron Lite's optimizer_offload sets offload_fraction 1: megatron-core's CPU optimizer (state and step on the host)
    ([f"actor@{A}.actor=mlite_actor", f"{E}.optimizer_offload=True"], "train.options.optimizer_cpu_offload", True),
    ([f"actor@{A}.actor=mlite_actor", f"{A}.model.enable_gradient_checkpointing=False", f"+{E}.impl_cfg.recompute=[full]"],
     "model.enable_gradient_checkpointing", True),
])
def test_an_engine_setting_lands_on_rl_cores_key(overrides, key, want):
    assert _value(_load(*overrides, profile="rl-core"), key) == want


@pytest.mark.parametrize(("override", "feature"), [
    (f"{A}.ref.veomni.expert_parallel_size=8", "train.expert_model_parallel_size"),  # differs from the actor's 1
    (f"+{A}.ref.veomni.router_replay.mode=R3", "routing replay in the reference"),
    (f"{V}.attn_implementation=native-sparse", "native sparse attention"),
    (f"{V}.mixed_precision=False", "without mixed precision"),
    (f"{V}.no_such_knob=1", "veomni engine"),
    (f"{T}.distributed.expert_fully_shard_parallel_size=2", "sharding each expert over FSDP ranks"),
    (f"+{T}.module_patches=[]", "FSDP-Turbo"),
    (f"+{E}.impl_cfg.recompute=[core_attn]", "recomputing only some modules"),
    (f"+{E}.impl_cfg.no_such_knob=1", "megatron-lite"),
    (f"{V}.fsdp_size=some", "not a number of ranks"),
    (f"{V}.fsdp_size=3", "does not divide"),
])
def test_a_refusal_names_the_key_as_written(override, feature):
    errors = _errors(_load("model_engine=veomni", override))
    written = override.split("=", 1)[0]
    assert [p.key for p in errors] == [written], [p.render() for p in errors]
    assert feature in errors[0].render()


@pytest.mark.parametrize("override", [f"{V}.attn_implementation=sdpa", f"{V}.moe_implementation=fused_triton", f"{V}.enable_full_shard=False",
                                      f"{V}.cross_entropy_loss_implementation=liger_kernel", f"+{T}.distributed.fsdp_plan.apply_modules={{lm_head:{{}}}}",
                                      f"+{T}.memory.recompute_plan=[a]", f"{E}.attention_backend_override=flash"])
def test_a_speed_knob_is_a_warning_that_names_it(override):
    loaded = _load("model_engine=veomni", override)
    written = override.split("=", 1)[0]
    assert not _errors(loaded) and any(p.key == written and p.severity == "warning" for p in loaded.problems)


def test_a_warmup_veomni_would_not_run_is_refused():
    """VeOmni's LR schedule reads lr_warmup_steps_ratio only: lr_warmup_steps would warm up in rl-core and not in verl."""
    (p,) = _errors(_load("model_engine=veomni", f"{A}.actor.optim.lr_warmup_steps=10"))
    assert p.key == f"{A}.actor.optim.lr_warmup_steps" and "lr_warmup_steps_ratio" in p.fix
    assert _value(_load("model_engine=veomni", f"{A}.actor.optim.lr_warmup_steps_ratio=0.1"), "actor.optim.lr_warmup_steps_ratio") == 0.1


def test_the_engine_selection_says_which_backend_runs_it():
    loaded = _load("model_engine=veomni")
    assert any(p.key == "model_engine" and p.severity == "warning" and "fsdp backend" in p.what for p in loaded.problems)


def test_veomni_takes_its_own_optimizer_defaults_under_the_verl_profile():
    """verl's optim/veomni.yaml schedules the LR by cosine (to lr_min 0 over the run, no warm-up); its FSDP engine keeps it constant."""
    verl = OmegaConf.load(HERE / "verl_generated_ppo_veomni_trainer.yaml").actor_rollout_ref.actor.optim
    loaded = _load("model_engine=veomni")
    assert ("actor.optim.lr_scheduler", "cosine", "constant") in loaded.profile_defaults
    critic = OmegaConf.load(HERE / "verl_generated_ppo_veomni_trainer.yaml").critic.optim
    assert loaded.config.critic.optim.lr_scheduler == critic.lr_scheduler_type == "cosine"
    optim = loaded.config.actor.optim
    assert (optim.lr_scheduler, optim.min_lr_ratio, optim.weight_decay, optim.grad_clip, list(optim.betas), optim.lr_warmup_steps_ratio) == (
        verl.lr_scheduler_type, verl.lr_min / verl.lr, verl.weight_decay, verl.clip_grad, list(verl.betas), verl.lr_warmup_steps_ratio)
    assert verl.lr_decay_ratio == 1.0 and verl.lr_start == 0.0  # what rl-core's cosine does (the whole run, from lr)
    assert _load("model_engine=veomni", f"{A}.actor.optim.lr_scheduler_type=constant").config.actor.optim.lr_scheduler == "constant"
    assert _load("model_engine=veomni", profile="rl-core").config.actor.optim.lr_scheduler == "constant"
    assert _load().config.actor.optim.lr_scheduler == "constant"  # verl's FSDP engine
    # actor.strategy=veomni alone switches the engine, not the optimizer config group (verl keeps optim/fsdp.yaml's constant)
    assert _load(f"{A}.actor.strategy=veomni").config.actor.optim.lr_scheduler == "constant"


@pytest.mark.parametrize(("script", "sp", "offload_policy"), [
    ("examples/grpo_trainer/run_qwen3_5_35b_a3b_veomni.sh", 2, False),
    ("examples/grpo_trainer/run_qwen3_5_27b_fsdp_turbo.sh", 1, True),
])
def test_verls_scripts_for_these_engines_resolve(script, sp, offload_policy):
    overrides = json.loads((HERE / "scripts.json").read_text())["scripts"][script]["overrides"]
    flag = lambda name: next((o.split("=", 1)[1] for o in overrides if o.startswith(f"--{name}=")), None)  # noqa: E731
    loaded = load_report(None, [o for o in overrides if not o.startswith("--")], config_path=flag("config-path"), config_name=flag("config-name"))
    assert not _errors(loaded), [p.render() for p in _errors(loaded)]
    c = loaded.config
    assert (c.train.name, c.actor.ulysses_sequence_parallel_size, c.actor.fsdp_config.offload_policy) == ("fsdp", sp, offload_policy)
    assert c.actor.fsdp_config.param_offload and c.actor.fsdp_config.optimizer_offload and c.actor.fsdp_config.fsdp_size == -1
    assert c.model.enable_gradient_checkpointing  # veomni: verl's profile default; turbo: its memory.recompute
