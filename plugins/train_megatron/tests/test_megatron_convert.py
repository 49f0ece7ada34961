"""HF <-> Megatron weight conversion: hand-worked QKV layout, exact round trips for TP 1 / 2 and PP 2, clear errors."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("megatron.core", reason="needs megatron-core (pip install megatron-core==0.16.1)")

from rl_core_testing.tiny_model import make_tiny_model_dir, tiny_config  # noqa: E402
from rl_train_megatron import convert  # noqa: E402
from rl_train_megatron.model import ModelShape, UnsupportedModelError, check_divisible, model_shape  # noqa: E402

pytestmark = pytest.mark.megatron


_CACHE: dict = {}


def _hf(tmp_path, arch, critic=False):
    """A tiny 4-layer model's (config, HF state dict), built once per (arch, critic) for the module."""
    from transformers import AutoModelForCausalLM, AutoModelForTokenClassification

    if (arch, critic) not in _CACHE:
        path = make_tiny_model_dir(tmp_path / arch, arch, layers=4)
        if critic:
            model = AutoModelForTokenClassification.from_pretrained(str(path), num_labels=1)
        else:
            model = AutoModelForCausalLM.from_pretrained(str(path))
        _CACHE[(arch, critic)] = (model.config, {k: v.clone() for k, v in model.state_dict().items()})
    return _CACHE[(arch, critic)]


def test_qkv_fusion_matches_a_hand_worked_layout():
    # 4 query heads, 2 KV heads, head size 1: Megatron groups rows as [q0 q1 k0 v0 | q2 q3 k1 v1]
    shape = ModelShape(layers=1, hidden=4, heads=4, kv_heads=2, head_dim=1, ffn=8, vocab=8, tied=False, qkv_bias=False, eps=1e-6, max_positions=8)
    q = torch.tensor([[10.0], [11.0], [12.0], [13.0]])
    k = torch.tensor([[20.0], [21.0]])
    v = torch.tensor([[30.0], [31.0]])
    fused = convert.fuse_qkv(q, k, v, shape)
    assert fused.flatten().tolist() == [10, 11, 20, 30, 12, 13, 21, 31]
    # TP 2 splits by query group: rank 1 holds [q2 q3 k1 v1]
    assert convert.tp_slice("decoder.layers.0.self_attention.linear_qkv.weight", fused, 2, 1).flatten().tolist() == [12, 13, 21, 31]
    back = convert.split_qkv(fused, shape)
    assert all(torch.equal(a, b) for a, b in zip(back, (q, k, v)))


def test_fc1_tp_slices_take_matching_gate_and_up_halves():
    gate, up = torch.arange(4.0).view(4, 1), torch.arange(10.0, 14.0).view(4, 1)
    fc1 = torch.cat([gate, up])
    name = "decoder.layers.0.mlp.linear_fc1.weight"
    assert convert.tp_slice(name, fc1, 2, 0).flatten().tolist() == [0, 1, 10, 11]
    assert convert.tp_slice(name, fc1, 2, 1).flatten().tolist() == [2, 3, 12, 13]
    assert torch.equal(convert.merge_tp(name, [convert.tp_slice(name, fc1, 2, r) for r in range(2)]), fc1)


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
@pytest.mark.parametrize("critic", [False, True])
@pytest.mark.parametrize(("tp", "pp"), [(1, 1), (2, 1), (1, 2), (2, 2)])
def test_round_trip_is_exact(tmp_path, arch, critic, tp, pp):
    cfg, hf = _hf(tmp_path, arch, critic)
    shape = model_shape(cfg, critic=critic)
    check_divisible(shape, tp, pp)
    full = convert.hf_to_full(hf, shape)
    per_rank = {(t, p): convert.split_for_rank(full, shape, tp, t, pp, p) for t in range(tp) for p in range(pp)}
    if tp == 2:  # the shards really are halves, and differ
        a, b = per_rank[(0, 0)]["decoder.layers.0.self_attention.linear_qkv.weight"], per_rank[(1, 0)]["decoder.layers.0.self_attention.linear_qkv.weight"]
        assert a.shape[0] == shape.kv_heads // 2 * shape.group_rows and not torch.equal(a, b)
    if pp == 2:  # each stage holds its own half of the layers, numbered from 0
        assert "decoder.layers.1.input_layernorm.weight" in per_rank[(0, 1)] and "decoder.layers.2.input_layernorm.weight" not in per_rank[(0, 1)]
        assert "embedding.word_embeddings.weight" not in per_rank[(0, 1)] and "decoder.final_layernorm.weight" not in per_rank[(0, 0)]
    back = convert.full_to_hf_dict(convert.merge_ranks(per_rank, shape, tp, pp), shape)
    want = {k: v for k, v in hf.items() if not (shape.tied and k == "lm_head.weight")}
    assert set(back) == set(want)
    for name, t in want.items():
        assert torch.equal(back[name], t), name


def test_round_trip_with_uneven_pipeline_stages(tmp_path):
    """num_layers_in_first_pipeline_stage=1 over PP 2 with TP 2: stage 0 holds layer 0, stage 1 layers 1-3 (local 0-2)."""
    import attrs

    from rl_train_megatron.stages import stage_sizes

    cfg, hf = _hf(tmp_path, "qwen2", False)
    shape = model_shape(cfg)
    shape = attrs.evolve(shape, stages=stage_sizes(shape.layers, 2, {"num_layers_in_first_pipeline_stage": 1}))
    assert shape.stages == (1, shape.layers - 1)
    check_divisible(shape, 2, 2)
    full = convert.hf_to_full(hf, shape)
    per_rank = {(t, p): convert.split_for_rank(full, shape, 2, t, 2, p) for t in range(2) for p in range(2)}
    layers = [{k.split(".")[2] for k in per_rank[(0, p)] if k.startswith("decoder.layers.")} for p in range(2)]
    assert layers == [{"0"}, {str(i) for i in range(shape.layers - 1)}]
    assert torch.equal(per_rank[(0, 1)]["decoder.layers.0.input_layernorm.weight"], hf["model.layers.1.input_layernorm.weight"])
    back = convert.full_to_hf_dict(convert.merge_ranks(per_rank, shape, 2, 2), shape)
    want = {k: v for k, v in hf.items() if not (shape.tied and k == "lm_head.weight")}
    assert set(back) == set(want) and all(torch.equal(back[n], t) for n, t in want.items())


def test_tied_embeddings_reach_the_last_pipeline_stage_as_its_lm_head(tmp_path):
    cfg, hf = _hf(tmp_path, "qwen2")
    shape = model_shape(cfg)
    assert shape.tied
    last = convert.split_for_rank(convert.hf_to_full(hf, shape), shape, 1, 0, 2, 1)
    assert torch.equal(last["output_layer.weight"], hf["model.embed_tokens.weight"])


def test_unsupported_models_are_clear_errors():
    from transformers import GPT2Config

    with pytest.raises(UnsupportedModelError, match="gpt2.*LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM.*train.name=fsdp"):
        model_shape(GPT2Config())
    cfg = tiny_config("llama")
    cfg.mlp_bias = True
    with pytest.raises(UnsupportedModelError, match="mlp_bias"):
        model_shape(cfg)


def test_sizes_that_do_not_divide_are_clear_errors():
    shape = model_shape(tiny_config("qwen2", heads=4, kv_heads=2, layers=3))
    with pytest.raises(ValueError, match=r"tensor_model_parallel_size=4 does not divide the model's key/value heads \(2 % 4 = 2\)"):
        check_divisible(shape, 4, 1)
    with pytest.raises(ValueError, match=r"pipeline_model_parallel_size=2 does not divide the model's 3 layers"):
        check_divisible(shape, 1, 2)


def test_hf_weights_that_do_not_fit_are_named(tmp_path):
    cfg, hf = _hf(tmp_path, "llama")
    del hf["model.layers.1.mlp.up_proj.weight"]
    with pytest.raises(convert.ConversionError, match="model.layers.1.mlp.up_proj.weight"):
        convert.hf_to_full(hf, model_shape(cfg))
