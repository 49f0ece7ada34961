"""vLLM's routed experts -> rl-core's batch field ``routed_experts`` (rl_rollout_vllm.routing), no engine needed.

The arrays are laid out as vLLM 0.26 returns them (``CompletionOutput.routed_experts``: uint8 ``[prompt + response - 1,
num_hidden_layers, top_k]``, zeros in layers without a router); the expected batch positions are worked out by hand
below for each row.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from rl_routing_replay.replay import NO_ROUTE
from rl_rollout_vllm.routing import RoutedExpertsError, RoutingLayout, check_layers, hf_layout, routed_field

#: 3 decoder layers, layer 1 dense (no router), top-2
LAYOUT = RoutingLayout(layers=3, router_layers=(0, 2), top_k=2)


def _vllm_array(sample: int, tokens: int) -> np.ndarray:
    """What vLLM would return for one sample: token t's experts in a routed layer ``(s*40 + 2t, s*40 + 2t + 1)``
    (layer 2: +100), zeros in the dense layer 1."""
    a = np.zeros((tokens, 3, 2), dtype=np.uint8)
    for t in range(tokens):
        a[t, 0] = (sample * 40 + 2 * t, sample * 40 + 2 * t + 1)
        a[t, 2] = a[t, 0] + 100
    return a


def _experts(sample: int, t: int) -> list[list[int]]:
    """The expected slot values of vLLM's row ``t`` of ``sample``: [layer 0, layer 1 (-1: dense), layer 2]."""
    e = [sample * 40 + 2 * t, sample * 40 + 2 * t + 1]
    return [e, [NO_ROUTE, NO_ROUTE], [e[0] + 100, e[1] + 100]]


def test_the_field_is_aligned_with_input_ids_as_the_hf_rollout_lays_it_out():
    # 2 prompts left-padded to P=4 (3 and 4 real tokens), n=2, R=3; responses of 3, 1, 2 and 0 tokens
    prompt_mask = torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]])
    lengths = torch.tensor([3, 1, 2, 0])
    arrays = [_vllm_array(0, 3 + 3 - 1), _vllm_array(1, 3 + 1 - 1), _vllm_array(2, 4 + 2 - 1), None]
    out = routed_field(arrays, prompt_mask, 2, lengths, 3, LAYOUT)
    assert out.shape == (4, 7, 3, 2) and out.dtype == torch.int16
    none = [[NO_ROUTE] * 2] * 3
    # row 0: padding at column 0; prompt columns 1-3 = vLLM rows 0-2; response tokens 0, 1 (columns 4, 5) = rows 3, 4;
    # the last sampled token (column 6) was never forwarded
    assert out[0].tolist() == [none, _experts(0, 0), _experts(0, 1), _experts(0, 2), _experts(0, 3), _experts(0, 4), none]
    # row 1: one response token, the last sampled one: only the prompt is routed
    assert out[1].tolist() == [none, _experts(1, 0), _experts(1, 1), _experts(1, 2), none, none, none]
    # row 2: no padding; response token 0 (column 4) = row 4; column 5 (last sampled) and 6 (padding) unrouted
    assert out[2].tolist() == [_experts(2, 0), _experts(2, 1), _experts(2, 2), _experts(2, 3), _experts(2, 4), none, none]
    # row 3: an empty generation carries no loss: nothing is replayed
    assert (out[3] == NO_ROUTE).all()


def test_uint16_expert_ids_above_255_survive():
    layout = RoutingLayout(layers=1, router_layers=(0,), top_k=1)
    a = np.array([[[300]], [[511]]], dtype=np.uint16)
    out = routed_field([a], torch.tensor([[1, 1]]), 1, torch.tensor([1]), 2, layout)
    assert out[0, :, 0, 0].tolist() == [300, 511, NO_ROUTE, NO_ROUTE]


@pytest.mark.parametrize(("array", "needs"), [
    (np.zeros((4, 3, 2), np.uint8), "[3 routed tokens, 3 layers, top-k 2]"),  # one token too many
    (np.zeros((3, 2, 2), np.uint8), "[3 routed tokens, 3 layers, top-k 2]"),  # layers
    (np.zeros((3, 3, 4), np.uint8), "[3 routed tokens, 3 layers, top-k 2]"),  # top-k
])
def test_a_routing_that_does_not_fit_the_sample_is_refused_by_sample(array, needs):
    with pytest.raises(RoutedExpertsError, match=r"sample 0 have shape .*its 3 prompt and 1 response tokens need") as err:
        routed_field([array], torch.tensor([[0, 1, 1, 1]]), 1, torch.tensor([1]), 2, LAYOUT)
    assert needs in str(err.value)


def test_missing_routing_and_sample_count_are_refused():
    with pytest.raises(RoutedExpertsError, match="no routed experts for sample 0"):
        routed_field([None], torch.tensor([[1, 1]]), 1, torch.tensor([2]), 2, LAYOUT)
    with pytest.raises(RoutedExpertsError, match="routing for 1 samples, the batch has 2"):
        routed_field([None], torch.tensor([[1, 1]]), 2, torch.tensor([2, 2]), 2, LAYOUT)


def test_hf_layout_is_the_models_router_layers(tmp_path):
    import attrs
    from rl_core.config.schema import ModelConfig, RunConfig
    from rl_core_testing.tiny_model import make_tiny_model_dir

    path = make_tiny_model_dir(tmp_path / "moe", "qwen3_moe", hidden=64, layers=3, heads=2, kv_heads=2)
    cfg = RunConfig(model=ModelConfig(path=str(path)))
    assert hf_layout(cfg) == RoutingLayout(3, (0, 1, 2), 2)
    # Qwen3-MoE's mlp_only_layers: layer 1 a dense MLP, no router
    dense1 = attrs.evolve(cfg, model=attrs.evolve(cfg.model, override_config={"mlp_only_layers": [1]}))
    assert hf_layout(dense1) == RoutingLayout(3, (0, 2), 2)
    plain = make_tiny_model_dir(tmp_path / "dense", "qwen2", hidden=64, heads=2, kv_heads=2)
    with pytest.raises(RoutedExpertsError, match="has no MoE top-k routers; set rollout.return_routed_experts=false"):
        hf_layout(RunConfig(model=ModelConfig(path=str(plain))))


def test_vllm_layers_other_than_the_hf_models_are_refused():
    check_layers(LAYOUT, [0, 2], "/m")
    with pytest.raises(RoutedExpertsError, match=r"vLLM routes the model at /m in decoder layers \[0, 1, 2\], transformers in \[0, 2\]"):
        check_layers(LAYOUT, [0, 1, 2], "/m")


def test_the_engine_asks_vllm_for_them_only_when_configured():
    from test_vllm_moe_parallel import _engine_kwargs

    assert _engine_kwargs("rollout.return_routed_experts=true", "actor.router_replay=R3", world=1)["enable_return_routed_experts"] is True
    assert "enable_return_routed_experts" not in _engine_kwargs(world=1)
