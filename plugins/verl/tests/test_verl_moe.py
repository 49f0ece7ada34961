"""verl's Megatron MoE keys (issue #37): expert parallelism mapped onto train.expert_*, its arithmetic checked with the key
and the fix, override_transformer_config.moe_* passed to the megatron backend or refused by key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rl_core.config.load import load_config, load_report
from rl_core.plugins import get_registry
from rl_core.plan.checks import plan_for
from rl_core.plan.resolver import resolve

V = "actor_rollout_ref"
MEG = ["model_engine=megatron", "trainer.n_gpus_per_node=4"]


def _resolve(tmp_path, *overrides):
    registry = get_registry()
    if "megatron" not in registry.cards["train"]:
        pytest.skip("needs the rl-train-megatron plugin")
    data = "data.train_files=" + str(Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "data" / "tiny_gsm8k.jsonl")
    config = load_config(None, [f"model.path={_moe_dir(tmp_path, num_experts=8)}", "model.random_init=true", data, *overrides], profile="rl-core")
    stack, problems = plan_for(config, registry, devices=False)
    return stack, [p for p in problems if p.severity == "error"]


def test_expert_sizes_map_and_the_reference_ties_to_them():
    cfg = load_config(None, [*MEG, f"{V}.actor.megatron.expert_model_parallel_size=4", f"{V}.actor.megatron.expert_tensor_parallel_size=1",
                             f"{V}.ref.megatron.expert_model_parallel_size=4", f"{V}.ref.megatron.expert_tensor_parallel_size=1"])
    assert (cfg.train.expert_model_parallel_size, cfg.train.expert_tensor_parallel_size) == (4, 1)
    errs = [p for p in load_report(None, [*MEG, f"{V}.actor.megatron.expert_model_parallel_size=4",
                                          f"{V}.ref.megatron.expert_model_parallel_size=2"]).problems if p.severity == "error"]
    assert [p.key for p in errs] == [f"{V}.ref.megatron.expert_model_parallel_size"]


def test_resolver_checks_the_expert_layout_against_the_world_and_the_backend(tmp_path):
    stack, errs = _resolve(tmp_path, *MEG, "train.expert_model_parallel_size=4")
    assert not errs, [p.render() for p in errs]
    _, errs = _resolve(tmp_path, *MEG, "train.expert_model_parallel_size=8")
    (p,) = errs
    assert p.key == "train.expert_model_parallel_size" and "does not divide the 4 devices" in p.what and "1, 2, 4" in p.fix
    # the fsdp backend spreads the experts over EP ranks too (rl_train_fsdp.experts), without expert TP
    _, errs = _resolve(tmp_path, "train.name=fsdp", "trainer.n_gpus_per_node=4", "train.expert_model_parallel_size=2")
    assert not errs, [p.render() for p in errs]
    _, errs = _resolve(tmp_path, "train.name=fsdp", "trainer.n_gpus_per_node=4", "train.expert_model_parallel_size=2", "train.expert_tensor_parallel_size=2")
    assert [p.key for p in errs] == ["train.expert_tensor_parallel_size"]


def _moe_dir(tmp_path, **extra):
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "config.json").write_text(json.dumps({
        "model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"], "num_attention_heads": 4, "num_key_value_heads": 2,
        "intermediate_size": 64, "moe_intermediate_size": 16, "vocab_size": 264, "num_hidden_layers": 2, **({"num_experts": 6} | extra)}))
    return str(tmp_path)


def test_megatron_checks_experts_tp_pp_and_expert_tp(tmp_path):
    plugin = pytest.importorskip("rl_train_megatron.plugin", reason="needs the rl-train-megatron plugin")
    model = f"model.path={_moe_dir(tmp_path)}"
    check = lambda *o: plugin.check_parallel_sizes(load_config(None, ["train.name=megatron", model, *o]))  # noqa: E731
    assert check("train.expert_model_parallel_size=3") == [] and check("train.expert_model_parallel_size=2") == []
    (p,) = check("train.expert_model_parallel_size=4")
    assert p.key == "train.expert_model_parallel_size" and "6 experts" in p.what and "3" in p.fix
    (p,) = check("train.tensor_model_parallel_size=2")
    assert p.key == "train.tensor_model_parallel_size" and "sequence parallelism" in p.what and "sequence_parallel=true" in p.fix
    assert check("train.tensor_model_parallel_size=2", "train.options.transformer_config.sequence_parallel=true") == []
    assert check("train.expert_model_parallel_size=2", "train.pipeline_model_parallel_size=2") == []  # EP across pipeline stages
    assert check("train.tensor_model_parallel_size=2", "train.options.transformer_config.sequence_parallel=true", "train.expert_tensor_parallel_size=1",
                 "train.expert_model_parallel_size=2", "train.pipeline_model_parallel_size=2") == []  # whole experts, TP 2, stages
    (p,) = check("train.expert_tensor_parallel_size=2")
    assert p.key == "train.expert_tensor_parallel_size"
    dense = tmp_path / "dense"
    dense.mkdir()
    (dense / "config.json").write_text(json.dumps({"model_type": "llama", "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 264}))
    (p,) = plugin.check_parallel_sizes(load_config(None, ["train.name=megatron", f"model.path={dense}", "train.expert_model_parallel_size=2"]))
    assert "not an MoE model" in p.what


def test_moe_transformer_config_fields_pass_or_are_refused_by_key(tmp_path):
    plugin = pytest.importorskip("rl_train_megatron.plugin", reason="needs the rl-train-megatron plugin")
    pytest.importorskip("megatron.core", reason="needs megatron-core")
    tc = f"{V}.actor.megatron.override_transformer_config"
    passed = {"moe_router_dtype": "fp32", "moe_aux_loss_coeff": 0.01, "moe_z_loss_coeff": 0.001, "moe_token_dispatcher_type": "alltoall",
              "moe_router_load_balancing_type": "none", "moe_shared_expert_overlap": False, "moe_router_bias_update_rate": 0,
              "moe_enable_deepep": True, "moe_router_enable_expert_bias": False}
    cfg = load_config(None, ["model_engine=megatron", *(f"+{tc}.{k}={v}" for k, v in passed.items()),
                             f"+{tc}.moe_grouped_gemm=True", f"+{tc}.moe_permute_fusion=True"])  # kernel switches: ignored with a warning
    assert cfg.train.options["transformer_config"] == passed | {"sequence_parallel": True}  # SP: verl's megatron default (profile)
    assert plugin.check_transformer_config(cfg) == []  # a GPU run: megatron-core receives them
    on_cpu = load_config(None, ["model_engine=megatron", "trainer.device=cpu", f"+{tc}.moe_token_dispatcher_type=flex", f"+{tc}.moe_enable_deepep=True"])
    keys = sorted(p.key for p in plugin.check_transformer_config(on_cpu))
    assert keys == ["train.options.transformer_config.moe_enable_deepep", "train.options.transformer_config.moe_token_dispatcher_type"]
    assert all("GPU only" in p.what for p in plugin.check_transformer_config(on_cpu))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "num_attention_heads": 4, "num_hidden_layers": 2}))
    dense = load_config(None, ["model_engine=megatron", f"model.path={tmp_path}", f"+{tc}.moe_aux_loss_coeff=0.01"])
    (w,) = plugin.check_transformer_config(dense)  # passed nowhere: said, not silently dropped
    assert w.severity == "warning" and "dense model" in w.what


def test_check_shows_the_expert_layout(tmp_path):
    stack, errs = _resolve(tmp_path, *MEG, "train.expert_model_parallel_size=2")
    assert not errs, [p.render() for p in errs]
    rows = dict(stack.sizes.table())
    assert "2 (ep)" in rows["train expert layout (MoE)"] and "2 expert data-parallel" in rows["train expert layout (MoE)"]


def test_memory_estimate_shards_the_routed_experts_over_ep(tmp_path):
    from rl_memory_estimate.estimate import estimate

    shape = {"model_type": "qwen3_moe", "hidden_size": 2048, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
             "intermediate_size": 6144, "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8, "vocab_size": 151936,
             "num_hidden_layers": 48}  # Qwen3-30B-A3B's shape: 30.5B parameters, 29.0B of them in routed experts
    per_rank = {}
    for ep in (1, 8):
        stack, errs = _resolve(tmp_path / f"ep{ep}", "train.name=megatron", "trainer.n_gpus_per_node=8", "trainer.device=cuda",
                               f"train.expert_model_parallel_size={ep}", "model.override_config={}")
        assert not errs, [p.render() for p in errs]
        (tmp_path / f"ep{ep}" / "config.json").write_text(json.dumps(shape))
        est = estimate(stack.config, stack.sizes, rollout=stack.rollout, train=stack.train)
        assert round(est.shape.params / 1e9, 1) == 30.5
        per_rank[ep] = est.terms["actor parameters (fp32)"]
    experts = 48 * 128 * 3 * 2048 * 768
    assert per_rank[1] == pytest.approx(4 * 30_532_110_336)
    assert per_rank[8] == pytest.approx(4 * (30_532_110_336 - experts + experts / 8))


def test_megatron_sequence_parallelism_as_verl_writes_it(tmp_path):
    plugin = pytest.importorskip("rl_train_megatron.plugin", reason="needs the rl-train-megatron plugin")
    pytest.importorskip("megatron.core", reason="needs megatron-core")
    meg = f"{V}.actor.megatron"
    cfg = load_config(None, ["model_engine=megatron", f"model.path={_moe_dir(tmp_path)}", f"{meg}.tensor_model_parallel_size=2",
                             f"{meg}.sequence_parallel=True", f"{V}.ref.megatron.sequence_parallel=True"])
    assert cfg.train.options["transformer_config"] == {"sequence_parallel": True}
    assert plugin.check_parallel_sizes(cfg) == [] and plugin.check_transformer_config(cfg) == []
    with_cp = load_report(None, ["model_engine=megatron", f"model.path={_moe_dir(tmp_path)}", f"+{meg}.override_transformer_config.sequence_parallel=True",
                                 f"{meg}.tensor_model_parallel_size=2", f"{meg}.context_parallel_size=2"])
    assert plugin.check_transformer_config(with_cp.config) == [] and plugin.check_parallel_sizes(with_cp.config) == []  # SP with CP, MoE


def test_verl_profile_gives_megatron_verls_engine_defaults():
    """verl's engine/megatron.yaml: sequence_parallel and use_distributed_optimizer are True; listed as profile defaults
    (with context parallelism too); the rl-core profile keeps rl-core's."""
    loaded = load_report(None, ["model_engine=megatron", f"{V}.actor.megatron.tensor_model_parallel_size=2"])
    assert loaded.config.train.distributed_optimizer and loaded.config.train.options["transformer_config"] == {"sequence_parallel": True}
    assert {"train.distributed_optimizer", "train.options.transformer_config.sequence_parallel"} <= {k for k, _, _ in loaded.profile_defaults}
    with_cp = load_config(None, ["model_engine=megatron", f"{V}.actor.megatron.context_parallel_size=2"])
    assert with_cp.train.distributed_optimizer and with_cp.train.options["transformer_config"] == {"sequence_parallel": True}
    own = load_config(None, ["model_engine=megatron", "profile=rl-core"])
    assert not own.train.distributed_optimizer and own.train.options == {}
    assert not load_config(None, [f"{V}.actor.strategy=fsdp2"]).train.distributed_optimizer
