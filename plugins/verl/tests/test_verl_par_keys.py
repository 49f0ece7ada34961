"""verl keys of issue #37 (par): the rollout MoE parallelism keys (mapped onto rollout.data_parallel_size /
expert_parallel_size, checked against the engine's card and the device arithmetic, rl_core.rollout.moe_parallel; the
engines' own tests check what vLLM / SGLang receive) and the small keys (optim.min_lr, ...)."""

from __future__ import annotations

from rl_core.cards import RolloutCard
from rl_core.config.load import load_config, load_report
from rl_core.rollout.builtin import HF_ROLLOUT
from rl_core.rollout.moe_parallel import moe_parallel_problems

R = "actor_rollout_ref.rollout"


def test_verl_keys_map():
    cfg = load_config(None, [f"{R}.tensor_model_parallel_size=2", f"{R}.data_parallel_size=4", f"{R}.expert_parallel_size=8"])
    assert (cfg.rollout.tensor_model_parallel_size, cfg.rollout.data_parallel_size, cfg.rollout.expert_parallel_size) == (2, 4, 8)
    # verl itself accepts a MoE TP size only with TensorRT-LLM: refused by the key as written
    (p,) = [p for p in load_report(None, [f"+{R}.moe_tensor_parallel_size=2"]).problems if p.severity == "error"]
    assert p.key.endswith("moe_tensor_parallel_size") and "TensorRT-LLM" in p.what


def _cfg(*overrides):
    return load_config(None, ["trainer.n_gpus_per_node=8", "trainer.device=cuda", *overrides])


def test_hf_rollout_refuses_them_by_key():
    problems = moe_parallel_problems(_cfg("rollout.data_parallel_size=2", "rollout.expert_parallel_size=2"), HF_ROLLOUT, " (installed: vllm)")
    assert [p.key for p in problems] == ["rollout.data_parallel_size", "rollout.expert_parallel_size"]
    assert "'hf' does not run data-parallel attention" in problems[0].what and "(installed: vllm)" in problems[0].fix


def test_the_arithmetic():
    card = RolloutCard(name="moe", factory="x:y", moe_parallel={"ep", "dp_attention"})
    assert moe_parallel_problems(_cfg("rollout.tensor_model_parallel_size=2", "rollout.data_parallel_size=4", "rollout.expert_parallel_size=8"), card) == []
    assert moe_parallel_problems(_cfg("rollout.tensor_model_parallel_size=2", "rollout.data_parallel_size=2"), card) == []  # two engines of 4
    (p,) = moe_parallel_problems(_cfg("rollout.tensor_model_parallel_size=8", "rollout.expert_parallel_size=64"), card)
    assert p.key == "rollout.expert_parallel_size" and "8 x 1 = 8" in p.what and "rollout.expert_parallel_size=8" in p.fix
    (p,) = moe_parallel_problems(_cfg("rollout.tensor_model_parallel_size=2", "rollout.data_parallel_size=3"), card)
    assert p.key == "rollout.data_parallel_size" and "2 x 3 = 6" in p.what and "1, 2, 4, 8" in p.fix
    # a rollout pool of its own counts its devices, not the actor's
    (p,) = moe_parallel_problems(_cfg("rollout.n_gpus_per_node=2", "rollout.data_parallel_size=4"), card)
    assert "rollout's 2 devices" in p.what


def test_min_lr_maps_to_the_absolute_floor():
    cfg = load_config(None, ["actor_rollout_ref.actor.optim.lr=1e-6", "actor_rollout_ref.actor.optim.min_lr=1e-7"])
    assert cfg.actor.optim.min_lr == 1e-7
    assert load_config(None, ["actor_rollout_ref.actor.optim.min_lr=0"]).actor.optim.min_lr is None  # verl's default: no floor


def test_pad_to_length_maps_and_needs_packing():
    A = "actor_rollout_ref.actor"
    cfg = load_config(None, [f"{A}.pad_to_length=True", f"{A}.fsdp_config.pad_to_length_bucket=512", "actor_rollout_ref.ref.pad_to_length=True"])
    assert cfg.actor.pad_to_length and cfg.actor.fsdp_config.pad_to_length_bucket == 512
    (p,) = [p for p in load_report(None, [f"{A}.pad_to_length=True", f"{A}.use_remove_padding=False"]).problems if p.severity == "error"]
    assert p.key.endswith("actor.pad_to_length") and "nothing is packed" in p.what


def test_verl_profiler_keys_map_and_npu_is_refused():
    A = "actor_rollout_ref"
    cfg = load_config(None, ["global_profiler.tool=torch", "global_profiler.steps=[2,4]", "global_profiler.save_path=/p",
                             f"{A}.actor.profiler.enable=True", f"{A}.rollout.profiler.enable=True", f"{A}.actor.profiler.ranks=[0,1]",
                             f"{A}.rollout.profiler.ranks=[0,1]", f"{A}.actor.profiler.all_ranks=False"])
    p = cfg.profiler
    assert (p.tool, p.steps, p.save_path, p.actor, p.rollout, p.ref, p.ranks, p.all_ranks) == ("torch", [2, 4], "/p", True, True, None, [0, 1], False)
    errs = {p.key: p for p in load_report(None, ["global_profiler.tool=npu", "global_profiler.steps=[1]",
                                                 f"{A}.actor.profiler.tool_config.npu.level=level0"]).problems if p.severity == "error"}
    assert set(errs) == {"global_profiler.tool", f"{A}.actor.profiler.tool_config.npu.level"}
    assert "npu / torch_memory" in errs["global_profiler.tool"].what and "profiler.tool=torch" in errs["global_profiler.tool"].fix
    assert "NPU" in errs[f"{A}.actor.profiler.tool_config.npu.level"].what
    assert load_config(None, ["critic.profiler.enable=True", "critic.profiler.ranks=[0]"]).profiler.critic is True
    # the roles share the workers: a rollout rank list other than the actor's is refused
    (e,) = [p for p in load_report(None, [f"{A}.actor.profiler.ranks=[0]", f"{A}.rollout.profiler.ranks=[1]"]).problems if p.severity == "error"]
    assert e.key == f"{A}.rollout.profiler.ranks"


def test_checkpoint_contents_map_and_need_the_model():
    A = "actor_rollout_ref.actor.checkpoint"
    cfg = load_config(None, [f"{A}.save_contents=['model', 'extra', 'hf_model']", f"{A}.load_contents=['model']"])
    assert (cfg.trainer.save_contents, cfg.trainer.load_contents) == (["model", "extra", "hf_model"], ["model"])
    errs = [p for p in load_report(None, [f"{A}.save_contents=['optimizer']"]).problems if p.severity == "error"]
    assert [p.key for p in errs] == [f"{A}.save_contents"] and "leaves the model out" in errs[0].what
    errs = [p for p in load_report(None, ["trainer.save_contents=[model,weights]"]).problems if p.severity == "error"]
    assert "weights is not a part of a checkpoint" in errs[0].what


def test_megatron_lite_offload_fraction_and_the_distributed_optimizer():
    O = "+actor_rollout_ref.actor.optim.override_optimizer_config.offload_fraction"  # Megatron Lite's spelling
    # (with verl's megatron defaults under the verl profile: sequence parallelism on, checked in test_verl_moe)
    assert load_config(None, ["model_engine=megatron", f"{O}=0.5"]).train.options["optimizer_offload_fraction"] == 0.5
    cfg = load_config(None, ["model_engine=megatron", "+actor_rollout_ref.actor.megatron.override_transformer_config.use_distributed_optimizer=True",
                             "+actor_rollout_ref.ref.megatron.override_transformer_config.use_distributed_optimizer=True"])
    assert cfg.train.distributed_optimizer is True  # rl_train_megatron.zero: AdamW state dealt over the replicas
    assert load_config(None, ["model_engine=megatron", "+actor_rollout_ref.actor.engine.impl_cfg.optimizer=dist_opt"]).train.distributed_optimizer
