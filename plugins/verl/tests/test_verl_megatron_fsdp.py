"""verl's ``megatron.use_megatron_fsdp`` (issue #37): read as ``train.options.fully_shard``, the megatron backend's fully sharded data
parallelism (its equality with plain data parallelism: plugins/train_megatron/tests/test_megatron_fsdp.py); verl's own script
resolves; what it is not built with is refused by key, with the fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rl_core.config.load import load_report
from rl_core.plugins import get_registry
from rl_core.plan.checks import plan_for
from rl_core.plan.resolver import resolve

V = "actor_rollout_ref"
DATA = "data.train_files=" + str(Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "data" / "tiny_gsm8k.jsonl")
SCRIPT = "examples/grpo_trainer/run_qwen2-7b_math_megatron_fsdp.sh"


def _model(tmp_path: Path, model_type: str = "qwen2") -> Path:
    shape = {"hidden_size": 3584, "num_attention_heads": 28, "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064,
             "num_hidden_layers": 28, "rms_norm_eps": 1e-6}  # Qwen2-7B's
    if model_type == "qwen2_moe":
        shape.update(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=2368, shared_expert_intermediate_size=2368)
    if model_type == "glm4_moe":  # a sigmoid-routed MoE
        shape.update(n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=2368, n_shared_experts=1, first_k_dense_replace=0)
    arch = {"qwen2": "Qwen2ForCausalLM", "qwen2_moe": "Qwen2MoeForCausalLM", "glm4_moe": "Glm4MoeForCausalLM"}[model_type]
    (tmp_path / "config.json").write_text(json.dumps({"model_type": model_type, "architectures": [arch], **shape}))
    return tmp_path


def _errors(model: Path, *overrides: str) -> tuple[object, list]:
    if "megatron" not in get_registry().cards["train"]:
        pytest.skip("needs the rl-train-megatron plugin")
    report = load_report(None, [f"{V}.model.path={model}", DATA, "model_engine=megatron",
                                f"{V}.actor.megatron.tensor_model_parallel_size=4", "trainer.n_gpus_per_node=8", "data.train_batch_size=8",
                                f"{V}.actor.megatron.use_megatron_fsdp=True", f"{V}.ref.megatron.use_megatron_fsdp=True", *overrides])
    _, problems = plan_for(report.config, get_registry(), devices=False)
    return report.config, [p for p in [*report.problems, *problems] if p.severity == "error" and p.key.startswith(("train.", "model.lora"))]


def test_verl_script_maps_use_megatron_fsdp_for_actor_and_ref():
    scripts = json.loads((Path(__file__).parent / "verl_scripts" / "scripts.json").read_text())
    given = scripts["scripts"][SCRIPT]["overrides"]
    flag = {o[2:].split("=", 1)[0]: o.split("=", 1)[1] for o in given if o.startswith("--")}
    cfg = load_report(None, [o for o in given if not o.startswith("--")], config_path=flag["config-path"], config_name=flag["config-name"]).config
    assert cfg.train.name == "megatron" and cfg.train.tensor_model_parallel_size == 4
    assert cfg.train.options["fully_shard"] is True


def test_dense_tp_x_dp_resolves_with_the_verl_defaults(tmp_path):
    cfg, errs = _errors(_model(tmp_path))
    assert not errs, [p.render() for p in errs]
    # verl's megatron defaults stay on: sequence parallelism, and the distributed optimizer that Megatron-FSDP runs with (its
    # AdamW state is sharded by the fully sharded model already)
    assert cfg.train.options == {"fully_shard": True, "transformer_config": {"sequence_parallel": True}} and cfg.train.distributed_optimizer


def test_ref_disagreeing_with_the_actor_is_refused(tmp_path):
    report = load_report(None, [f"{V}.model.path={_model(tmp_path)}", DATA, "model_engine=megatron",
                                f"{V}.actor.megatron.use_megatron_fsdp=True", f"{V}.ref.megatron.use_megatron_fsdp=False"])
    assert [p.key for p in report.problems if p.severity == "error"] == [f"{V}.ref.megatron.use_megatron_fsdp"]


@pytest.mark.parametrize("override, key, words", [
    (f"{V}.actor.megatron.pipeline_model_parallel_size=2", "train.pipeline_model_parallel_size", "pipeline stages"),
    (f"{V}.actor.megatron.context_parallel_size=2", "train.context_parallel_size", "context parallelism"),
    (f"{V}.actor.megatron.param_offload=True", "train.options.param_offload", "offload between phases"),
    (f"{V}.actor.megatron.optimizer_offload=True", "train.options.optimizer_offload", "offload between phases"),
])
def test_combinations_it_is_not_built_with_are_refused_by_key(tmp_path, override, key, words):
    _, errs = _errors(_model(tmp_path), override)
    (p,) = errs
    assert p.key == key and words in p.what and "train.options.fully_shard=false" in p.fix, p.render()


@pytest.mark.parametrize("model_type", ["qwen2_moe", "glm4_moe"])
def test_moe_models_are_refused(tmp_path, model_type):
    _, errs = _errors(_model(tmp_path, model_type))
    mine = [p for p in errs if p.key == "train.options.fully_shard"]
    assert len(mine) == 1 and f"MoE model ({model_type})" in mine[0].what, [p.render() for p in errs]
