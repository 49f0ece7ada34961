"""verl's uneven pipeline stages (issue #37): ``megatron.override_transformer_config.num_layers_in_{first,last}_pipeline_stage``
and ``account_for_{embedding,loss}_in_pipeline_split`` reach the megatron backend (which builds and converts each stage's
layers by megatron-core's rule); a split that does not exist is refused by the key as written. Expert parallelism
together with pipeline stages resolves, also with verl's expert_tensor_parallel_size=1 under TP > 1."""

from __future__ import annotations

import json

import pytest

from rl_core.config.load import load_report

V = "actor_rollout_ref"
TC = f"{V}.actor.megatron.override_transformer_config"


def _model(tmp_path, layers: int, moe: bool = False) -> str:
    tmp_path.mkdir(exist_ok=True)
    extra = {"model_type": "qwen3_moe", "num_experts": 4, "moe_intermediate_size": 16} if moe else {"model_type": "qwen3", "intermediate_size": 64}
    (tmp_path / "config.json").write_text(json.dumps({"num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 264,
                                                      "num_hidden_layers": layers, **extra}))
    return str(tmp_path)


def _check(tmp_path, layers: int, *overrides: str, moe: bool = False):
    """The megatron backend's checks of a verl-spelled config, named as written."""
    plugin = pytest.importorskip("rl_train_megatron.plugin", reason="needs the rl-train-megatron plugin")
    pytest.importorskip("megatron.core", reason="needs megatron-core")
    loaded = load_report(None, ["model_engine=megatron", f"{V}.model.path={_model(tmp_path, layers, moe)}", *overrides])
    assert loaded.config is not None, [p.render() for p in loaded.problems]
    cfg = loaded.config
    return loaded.as_written(plugin.check_parallel_sizes(cfg) + plugin.check_transformer_config(cfg))


def test_stage_sizes_follow_megatron_cores_rule():
    from rl_train_megatron.stages import StageSplitError, stage_sizes

    first, last = "num_layers_in_first_pipeline_stage", "num_layers_in_last_pipeline_stage"
    assert stage_sizes(4, 2) == (2, 2)
    assert stage_sizes(3, 2, {first: 1}) == (1, 2) and stage_sizes(4, 2, {last: "1"}) == (3, 1)
    assert stage_sizes(94, 8, {first: 11, last: 11}) == (11,) + (12,) * 6 + (11,)  # run_qwen3_235b_a22b_megatron's split
    assert stage_sizes(6, 4, {"account_for_embedding_in_pipeline_split": True, "account_for_loss_in_pipeline_split": True}) == (1, 2, 2, 1)
    assert stage_sizes(4, 2, {"account_for_loss_in_pipeline_split": False}) == (2, 2)
    for given, field in (({first: 0}, first), ({first: 2, last: 1}, first), ({first: 1, "account_for_loss_in_pipeline_split": True},
                         "account_for_loss_in_pipeline_split"), ({last: 2}, last)):
        with pytest.raises(StageSplitError) as err:
            stage_sizes(4 if field != last else 5, 2 if field != last else 3, given)
        assert err.value.field == field, given


def test_uneven_stages_as_verl_writes_them_resolve_and_a_bad_split_is_refused_by_key(tmp_path):
    pp = f"{V}.actor.megatron.pipeline_model_parallel_size"
    assert _check(tmp_path / "a", 3, f"{pp}=2", f"+{TC}.num_layers_in_first_pipeline_stage=1") == []
    assert _check(tmp_path / "b", 5, f"{pp}=3", f"+{TC}.num_layers_in_first_pipeline_stage=1", f"+{TC}.num_layers_in_last_pipeline_stage=2") == []
    (p,) = _check(tmp_path / "c", 4, f"{pp}=3", f"+{TC}.num_layers_in_first_pipeline_stage=1")  # 3 layers left for 2 stages
    assert p.key == f"+{TC}.num_layers_in_first_pipeline_stage" and "share them equally" in p.what and "num_hidden_layers 4" in p.fix
    (p,) = _check(tmp_path / "d", 4, f"+{TC}.num_layers_in_last_pipeline_stage=2")  # PP 1
    assert p.key == f"+{TC}.num_layers_in_last_pipeline_stage" and "pipeline_model_parallel_size is 1" in p.what
    (p,) = _check(tmp_path / "e", 4, f"{pp}=2", f"+{TC}.account_for_loss_in_pipeline_split=True")  # 4 + 1 over 2 stages
    assert p.key == f"+{TC}.account_for_loss_in_pipeline_split" and "does not divide 5 layers" in p.what


def test_expert_parallelism_across_pipeline_stages_resolves(tmp_path):
    meg = f"{V}.actor.megatron"
    assert _check(tmp_path, 3, f"{meg}.pipeline_model_parallel_size=2", f"{meg}.expert_model_parallel_size=2",
                  f"+{TC}.num_layers_in_first_pipeline_stage=1", moe=True) == []


def test_expert_tp1_with_tp2_across_pipeline_stages_resolves(tmp_path):
    """verl's run_qwen3_5_122b_a10b / run_qwen3_5_397b / moonlight layout (experts whole, attention over TP 2, stages): the
    megatron backend trains it (plugins/train_megatron/tests/test_megatron_moe.py, 4 gloo processes == one)."""
    meg = f"{V}.actor.megatron"
    layout = [f"{meg}.tensor_model_parallel_size=2", f"{meg}.pipeline_model_parallel_size=2", f"{meg}.expert_model_parallel_size=2",
              f"{meg}.expert_tensor_parallel_size=1", f"{V}.ref.megatron.expert_tensor_parallel_size=1", "trainer.n_gpus_per_node=8"]
    assert _check(tmp_path, 4, *layout, moe=True) == []  # the verl profile turns sequence parallelism on (MoE with TP 2 needs it)
