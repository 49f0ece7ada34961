"""verl's Megatron virtual pipeline keys (issue #37) map onto train.options.virtual_pipeline_model_parallel_size (the megatron
backend's interleaved model chunks, rl_train_megatron.stages.virtual_split); the reference model follows the actor's layout."""

from __future__ import annotations

import json

import pytest

from rl_core.config.load import load_config, load_report

V = "actor_rollout_ref"
MEG = ["model_engine=megatron", f"{V}.actor.megatron.pipeline_model_parallel_size=2"]
VPP = "megatron.virtual_pipeline_model_parallel_size"


def _errors(overrides):
    return [p for p in load_report(None, overrides).problems if p.severity == "error"]


def test_actor_and_ref_virtual_pipeline_size_map():
    cfg = load_config(None, [*MEG, f"{V}.actor.{VPP}=2", f"{V}.ref.{VPP}=2", f"critic.{VPP}=2"])
    assert cfg.train.name == "megatron" and cfg.train.pipeline_model_parallel_size == 2
    assert cfg.train.options["virtual_pipeline_model_parallel_size"] == 2


def test_verls_default_null_is_no_virtual_stages():
    cfg = load_config(None, [*MEG, f"{V}.actor.{VPP}=null", f"{V}.ref.{VPP}=null"])
    assert cfg.train.options.get("virtual_pipeline_model_parallel_size") is None


def test_a_reference_layout_other_than_the_actors_is_refused_by_its_key():
    problems = _errors([*MEG, f"{V}.actor.{VPP}=2", f"{V}.ref.{VPP}=4", f"critic.{VPP}=1"])
    assert sorted(p.key for p in problems) == [f"{V}.ref.{VPP}", f"critic.{VPP}"], [p.render() for p in problems]


def _check(tmp_path, layers: int, *overrides: str):
    """The megatron backend's checks of a verl-spelled config (a model of ``layers`` layers), named as written."""
    plugin = pytest.importorskip("rl_train_megatron.plugin", reason="needs the rl-train-megatron plugin")
    pytest.importorskip("megatron.core", reason="needs megatron-core")
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen3", "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 264,
                                                      "intermediate_size": 64, "num_hidden_layers": layers}))
    loaded = load_report(None, ["model_engine=megatron", f"{V}.model.path={tmp_path}", *overrides])
    assert loaded.config is not None, [p.render() for p in loaded.problems]
    cfg = loaded.config
    return loaded.as_written(plugin.check_parallel_sizes(cfg) + plugin.check_transformer_config(cfg))


def test_run_qwen3_30b_a3b_megatrons_split_resolves_and_splits_that_do_not_exist_are_refused_by_key(tmp_path):
    pp, vpp = f"{V}.actor.megatron.pipeline_model_parallel_size", f"{V}.actor.{VPP}"
    assert _check(tmp_path / "a", 48, f"{pp}=2", f"{vpp}=2") == []  # Qwen3-30B-A3B's 48 layers: 4 chunks of 12
    (p,) = _check(tmp_path / "b", 6, f"{pp}=2", f"{vpp}=2")  # 6 layers, 4 chunks
    assert p.key == vpp and "6 % 4 = 2" in p.what and "v with 2 x v dividing 6: 1, 3" in p.fix
    (p,) = _check(tmp_path / "c", 4, f"{vpp}=2")  # PP 1
    assert p.key == vpp and "train.pipeline_model_parallel_size is 1" in p.what
    (p,) = _check(tmp_path / "d", 8, f"{pp}=2", f"{vpp}=2", f"+{V}.actor.megatron.override_transformer_config.num_layers_in_first_pipeline_stage=2")
    assert p.key == f"+{V}.actor.megatron.override_transformer_config.num_layers_in_first_pipeline_stage" and "virtual_pipeline_model_parallel_size=1" in p.fix


def test_a_custom_pipeline_layout_as_verl_writes_it_resolves_and_a_wrong_one_is_refused_by_key(tmp_path):
    """run_deepseek_v4_flash_megatron passes ++...override_transformer_config.pipeline_model_parallel_layout='Et*6|t*6|...|t*5L'."""
    pp, tc = f"{V}.actor.megatron.pipeline_model_parallel_size", f"{V}.actor.megatron.override_transformer_config"
    assert _check(tmp_path / "a", 43, f"{pp}=8", f"++{tc}.pipeline_model_parallel_layout='Et*6|t*6|t*6|t*5|t*5|t*5|t*5|t*5L'") == []
    (p,) = _check(tmp_path / "b", 44, f"{pp}=8", f"++{tc}.pipeline_model_parallel_layout='Et*6|t*6|t*6|t*5|t*5|t*5|t*5|t*5L'")
    assert p.key == f"++{tc}.pipeline_model_parallel_layout" and "places 43 decoder layers ('t'), the model has 44" in p.what
