"""MoE routing replay (rl-routing-replay): recorded top-k experts are what a replayed forward's experts get, the
weights are the live router's probabilities at them (so the router still trains), replaying a model's own routing
changes nothing, and the hf rollout records every token it routed (rollout.return_routed_experts)."""

from __future__ import annotations

import pytest
import torch
from rl_routing_replay.feature import FEATURE
from rl_routing_replay.replay import NO_ROUTE, RouterReplay, RoutingReplayError

pytestmark = pytest.mark.usefixtures("one_thread")


def _tiny(arch: str):
    from transformers import MixtralConfig, MixtralForCausalLM, Qwen2MoeConfig, Qwen2MoeForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM

    common = dict(vocab_size=64, hidden_size=32, intermediate_size=32, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                  max_position_embeddings=64, num_experts_per_tok=2)
    if arch == "qwen3_moe":  # layer 1 dense (mlp_only_layers): its slot of routed_experts stays empty
        model = Qwen3MoeForCausalLM(Qwen3MoeConfig(head_dim=8, num_experts=6, moe_intermediate_size=16, mlp_only_layers=[1], norm_topk_prob=True, **common))
    elif arch == "qwen2_moe":  # a shared expert, top-k weights not renormalised
        model = Qwen2MoeForCausalLM(Qwen2MoeConfig(num_experts=6, moe_intermediate_size=16, shared_expert_intermediate_size=32, norm_topk_prob=False, **common))
    else:
        model = MixtralForCausalLM(MixtralConfig(num_local_experts=6, **common))
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.3)  # routers drawn too (their init is zeros: every expert would tie)
    return model.eval()


def _inputs(rows=3, width=7, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, 64, (rows, width), generator=g)
    mask = torch.ones(rows, width, dtype=torch.long)
    mask[0, :3] = 0  # left padding
    mask[1, -2:] = 0  # right padding (a short response)
    return ids, mask


def _experts_calls(model):
    """What each MoE layer's experts module was called with: [(layer, top_k_index, top_k_weights)]."""
    calls = []
    for name, m in model.named_modules():
        if name.endswith("mlp.experts"):
            layer = int(name.split("layers.")[1].split(".")[0])
            m.register_forward_pre_hook(lambda mod, args, layer=layer: calls.append((layer, args[1].clone(), args[2].detach().clone())))
    return calls


@pytest.mark.parametrize("arch", ["qwen3_moe", "qwen2_moe", "mixtral"])
def test_replaying_the_models_own_routing_changes_nothing(arch):
    model = _tiny(arch)
    rr = RouterReplay(model)
    ids, mask = _inputs()
    with torch.no_grad():
        plain = model(input_ids=ids, attention_mask=mask).logits
        with rr.recording():
            model(input_ids=ids, attention_mask=mask)
        routed = rr.recorded_layout(mask)
        with rr.replaying(routed, mask):
            again = model(input_ids=ids, attention_mask=mask).logits
    assert routed.shape == (3, 7, 3, 2) and routed.dtype == torch.int16
    assert (routed[~mask.bool()] == NO_ROUTE).all() and (routed[mask.bool()][:, rr.router_layers] >= 0).all()
    if arch == "qwen3_moe":
        assert rr.router_layers == [0, 2] and (routed[:, :, 1] == NO_ROUTE).all()
    assert torch.equal(again, plain)


@pytest.mark.parametrize("arch", ["qwen3_moe", "mixtral"])
def test_forced_experts_reach_the_experts_weighted_by_the_live_router(arch):
    model = _tiny(arch)
    rr = RouterReplay(model)
    ids, mask = _inputs()
    with torch.no_grad(), rr.recording():
        model(input_ids=ids, attention_mask=mask)
    native = rr.recorded_layout(mask)
    forced = native.clone()
    real = mask.bool()
    forced[real] = torch.where(forced[real] >= 0, (forced[real].long() + 3) % 6, forced[real].long()).to(torch.int16)  # other experts
    forced[2, 4, rr.router_layers[0]] = NO_ROUTE  # a token without a record: routed natively
    calls = _experts_calls(model)
    model.train()
    with rr.replaying(forced, mask):
        out = model(input_ids=ids, attention_mask=mask).logits
        out[real].float().pow(2).mean().backward()
    model.zero_grad()
    forward_calls = calls[: len(rr.router_layers)]
    flat_real = real.reshape(-1).nonzero().squeeze(1)
    for (layer, index, weights), router_layer in zip(forward_calls, rr.router_layers):
        assert layer == router_layer
        want = forced[real][:, layer].long()
        got = index[flat_real]
        known = (want >= 0).all(-1)
        assert torch.equal(got[known], want[known])  # every recorded token went to its recorded experts
        native_row = native[2, 4, layer].long()
        if layer == rr.router_layers[0]:
            assert torch.equal(index[2 * 7 + 4], native_row)  # the unrecorded one kept the router's own choice
        assert not torch.equal(got[known], native[real][:, layer].long()[known])
    # the weights: the current softmax at the forced experts, renormalised (both families renormalise)
    router = dict((layer, m) for layer, m in ((int(n.split("layers.")[1].split(".")[0]), m) for n, m in model.named_modules() if n.endswith("mlp.gate")))
    layer0 = rr.router_layers[0]
    hidden = {}
    router[layer0].register_forward_pre_hook(lambda mod, args: hidden.setdefault("h", args[0].detach().clone()))
    with torch.no_grad(), rr.replaying(forced, mask):
        model(input_ids=ids, attention_mask=mask)
    probs = torch.softmax(torch.nn.functional.linear(hidden["h"].reshape(-1, 32), router[layer0].weight).float(), -1)
    idx = calls[-len(rr.router_layers)][1]
    want_w = probs.gather(1, idx)
    want_w = want_w / want_w.sum(-1, keepdim=True)
    torch.testing.assert_close(calls[-len(rr.router_layers)][2].float(), want_w, rtol=1e-5, atol=1e-6)


def test_replayed_routers_still_get_gradients():
    """As megatron-core's RouterReplay and verl: only the choice is replayed; the router's weights are trained through the
    probabilities at the replayed experts."""
    model = _tiny("qwen3_moe")
    rr = RouterReplay(model)
    ids, mask = _inputs()
    with torch.no_grad(), rr.recording():
        model(input_ids=ids, attention_mask=mask)
    routed = rr.recorded_layout(mask)
    model.train()
    grads = {}
    for replay in (False, True):
        model.zero_grad()
        with rr.replaying(routed, mask) if replay else torch.enable_grad():
            model(input_ids=ids, attention_mask=mask).logits[mask.bool()].float().pow(2).mean().backward()
        grads[replay] = {n: p.grad.clone() for n, p in model.named_parameters() if n.endswith("mlp.gate.weight")}
    assert len(grads[True]) == 2 and all(g.abs().sum() > 0 for g in grads[True].values())
    for name, g in grads[True].items():  # own routing replayed: the same gradients, the router's included
        torch.testing.assert_close(g, grads[False][name], rtol=1e-6, atol=1e-7)


def test_bad_targets_and_models_are_refused():
    model = _tiny("qwen3_moe")
    rr = RouterReplay(model)
    ids, mask = _inputs()
    with pytest.raises(RoutingReplayError, match=r"\[rows, 7 tokens, 3 layers, top-k 2\]"):
        rr.replay(torch.zeros(3, 7, 2, 2, dtype=torch.int16), mask)
    rr.replay(torch.zeros(3, 7, 3, 2, dtype=torch.int16), mask)
    short = mask.clone()
    short[2, 0] = 0  # one real token fewer than the targets describe
    with pytest.raises(RoutingReplayError, match="real tokens"), torch.no_grad():
        model(input_ids=ids, attention_mask=short)
    rr.stop()
    from transformers import Qwen2Config, Qwen2ForCausalLM

    dense = Qwen2ForCausalLM(Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=32, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2))
    with pytest.raises(RoutingReplayError, match="has no MoE top-k routers to replay; set it to disabled"):
        RouterReplay(dense)


def test_hf_rollout_records_every_routed_token(tiny_model_dir):
    """R3's rollout side: each token's experts as the rollout routed them; -1 where nothing was routed; and a full
    forward of the finished sequences, replaying them, gives the rollout's log-probs."""
    from rl_core.backends import SamplingParams, WorkerContext
    from rl_core.config.schema import ActorConfig, DataConfig, ModelConfig, RolloutConfig, RunConfig
    from rl_core.modeling import forward_response
    from rl_core.rollout.hf import HFRolloutEngine
    from rl_core_testing.rollout_conformance import prompt_batch

    path = tiny_model_dir("qwen3_moe")
    cfg = RunConfig(model=ModelConfig(path=str(path)), data=DataConfig(max_prompt_length=32),
                    rollout=RolloutConfig(return_routed_experts=True), actor=ActorConfig(router_replay="R3"))
    engine = HFRolloutEngine(cfg, WorkerContext(features={"routing_replay": FEATURE}))  # the Plan's feature, as a worker gets it
    prompts = prompt_batch(path)
    out = engine.generate(prompts, SamplingParams(n=2, temperature=1.0, max_new_tokens=6, logprobs=True, seed=3))
    rows = len(prompts) * 2
    routed, mask = out["routed_experts"], out["attention_mask"].bool()
    P = prompts["input_ids"].shape[1]
    assert routed.shape == (rows, P + 6, engine.routing.replay.layers, 2) and routed.dtype == torch.int16
    assert (routed[~mask] == NO_ROUTE).all()
    lengths = out["response_mask"].sum(-1)
    for i in range(rows):  # every real token was routed except the last sampled one (never fed back)
        last = P + int(lengths[i]) - 1
        assert (routed[i, last] == NO_ROUTE).all()
        assert (routed[i][mask[i]][:-1] >= 0).all()
    model = engine.model
    rr = engine.routing.replay  # the same recorder replays on this model
    args = (out["input_ids"], out["attention_mask"], out["position_ids"], out["responses"])
    with torch.no_grad(), rr.replaying(routed, out["attention_mask"]):
        replayed, _ = forward_response(model, *args)
    rmask = out["response_mask"].bool()
    torch.testing.assert_close(replayed[rmask], out["rollout_log_probs"][rmask], rtol=1e-5, atol=1e-5)


def test_a_router_of_other_math_is_refused_by_name():
    """DeepSeek-V3's router (sigmoid scores, expert groups, a correction bias) weights its experts otherwise: refused, not
    replayed with the wrong weights."""
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    model = DeepseekV3ForCausalLM(DeepseekV3Config(
        vocab_size=64, hidden_size=32, intermediate_size=32, moe_intermediate_size=16, num_hidden_layers=2, first_k_dense_replace=1,
        num_attention_heads=4, num_key_value_heads=4, n_routed_experts=4, num_experts_per_tok=2, n_group=1, topk_group=1,
        q_lora_rank=None, kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=8))
    with pytest.raises(RoutingReplayError, match="DeepseekV3TopkRouter .layer 1. is not one rl-core can replay"):
        RouterReplay(model)
