"""Sigmoid-routed MoE families on the megatron backend: HY-V3 (tencent/Hy3) and GLM-4-MoE (GLM-4.5 / Air), tiny models
built from a config (no downloads), with a random expert bias (``e_score_correction_bias``) that changes the routing.

- HF -> Megatron (experts over EP ranks) -> HF gives back every tensor bit for bit, the bias included;
- one process: log-probs equal transformers' own forward (fp32);
- the expert bias update (``moe_router_bias_update_rate`` > 0): after a step the bias moved by
  ``sign(mean load - load) x rate``, the loads counted here from transformers' own routing of the same tokens;
- TP 2 (sequence parallel) and EP 2 on 2 gloo processes equal one process (log-probs, metrics, weights and bias after
  two updates);
- the checks: expert bias accepted for these models and refused for a softmax-routed one, MTP layers and unknown config
  fields refused by name;
- a 2-step ``rlcore train`` GRPO with train.name=megatron: hf_final holds the trained weights (the bias included).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import attrs
import pytest
import torch

pytest.importorskip("megatron.core", reason="needs megatron-core (pip install megatron-core==0.16.1)")

from rl_core.backends import WorkerContext  # noqa: E402
from rl_core_testing.distributed import run_distributed  # noqa: E402
from rl_core_testing.tiny_model import EOS_ID, IM_START_ID, PAD_ID, build_tokenizer, save_quietly  # noqa: E402
from rl_core_testing.train_conformance import PROMPTS_PER_STEP, default_config, make_step_batch  # noqa: E402

pytestmark = pytest.mark.megatron

ARCHS = ("hy_v3", "glm4_moe")


def sigmoid_config(arch: str, *, layers: int = 3, **over):
    """4 heads of 8 (2 KV heads), 8 experts of width 16 (2 per token), one shared expert, the first layer dense; GLM: 2 expert
    groups (1 kept), q/k/v biases, q/k norms, half the head rotated."""
    common = dict(vocab_size=264, hidden_size=32, intermediate_size=64, num_hidden_layers=layers, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=8, num_experts_per_tok=2, moe_intermediate_size=16, max_position_embeddings=1024,
                  rms_norm_eps=1e-6, bos_token_id=IM_START_ID, eos_token_id=EOS_ID, pad_token_id=PAD_ID, tie_word_embeddings=False)
    if arch == "hy_v3":
        from transformers import HYV3Config

        cfg = HYV3Config(**{**common, "num_experts": 8, "num_shared_experts": 1, "router_scaling_factor": 2.5, **over})
    else:
        from transformers import Glm4MoeConfig

        glm = dict(n_routed_experts=8, n_shared_experts=1, routed_scaling_factor=2.5, n_group=2, topk_group=1, first_k_dense_replace=1,
                   attention_bias=True, use_qk_norm=True, num_nextn_predict_layers=0)
        cfg = Glm4MoeConfig(**{**common, **glm, **over})
    cfg.dtype = "float32"
    return cfg


def randomize(model) -> None:
    """Routers, q/k norms and expert biases drawn at random (their inits are zeros / ones: every expert would tie)."""
    with torch.no_grad():
        for name, t in list(model.named_parameters()) + list(model.named_buffers()):
            if name.endswith("mlp.gate.weight"):
                t.normal_(0, 0.5)
            elif name.endswith(("q_norm.weight", "k_norm.weight")):
                t.copy_(1 + 0.3 * torch.randn_like(t))
            elif name.endswith("e_score_correction_bias"):
                t.normal_(0, 0.3)
            elif name.endswith("_proj.bias"):
                t.normal_(0, 0.1)


def make_sigmoid_model_dir(path: Path, arch: str, seed: int = 0, **over) -> Path:
    from transformers import AutoModelForCausalLM, GenerationConfig

    path.mkdir(parents=True, exist_ok=True)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(sigmoid_config(arch, **over), dtype=torch.float32)
        randomize(model)
    model.generation_config = GenerationConfig(bos_token_id=IM_START_ID, eos_token_id=EOS_ID, pad_token_id=PAD_ID)
    save_quietly(model, path)
    build_tokenizer().save_pretrained(path)
    return path


@pytest.fixture(scope="module", params=ARCHS)
def sigmoid_model(request, tmp_path_factory):
    return request.param, make_sigmoid_model_dir(tmp_path_factory.mktemp(request.param), request.param)


def _config(model_dir, *, rate: float = 0.0, tp: int = 1, ep: int = 1, pp: int = 1, cp: int = 1):
    cfg = default_config(model_dir)
    cfg = attrs.evolve(cfg, actor=attrs.evolve(cfg.actor, ppo_epochs=1, use_kl_loss=False, entropy_coeff=0.0, ppo_mini_batch_size=PROMPTS_PER_STEP))
    # verl's run_hy_v3_megatron.sh: expert bias on, load balancing none (rate 0 there; > 0 here so the bias moves)
    tc = {"moe_router_enable_expert_bias": True, "moe_router_bias_update_rate": rate, "moe_router_load_balancing_type": "none",
          "moe_router_dtype": "fp32"}
    if tp > 1:
        tc["sequence_parallel"] = True
    if pp > 1:  # the dense layer 0 alone on the first stage, the 2 MoE layers on the second
        tc["num_layers_in_first_pipeline_stage"] = 1
    train = attrs.evolve(cfg.train, name="megatron", tensor_model_parallel_size=tp, expert_model_parallel_size=ep, pipeline_model_parallel_size=pp,
                         context_parallel_size=cp, options={"transformer_config": tc})
    return attrs.evolve(cfg, train=train)


def _reference(model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()


@pytest.mark.parametrize("arch", ARCHS)
def test_conversion_round_trip_keeps_every_tensor_and_the_expert_bias(arch):
    from transformers import AutoModelForCausalLM

    from rl_train_megatron import convert
    from rl_train_megatron.model import model_shape

    cfg = sigmoid_config(arch)
    torch.manual_seed(0)
    hf = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).state_dict()
    hf = {k: torch.randn_like(v) for k, v in hf.items()}  # every tensor distinct
    shape = model_shape(cfg)
    assert shape.moe and shape.expert_bias and shape.dense_layers == (0,) and shape.shared_ffn == 16 and shape.topk_scale == 2.5
    assert shape.qk_norm and shape.qkv_bias == (arch == "glm4_moe") and (shape.groups, shape.group_topk) == ((2, 1) if arch == "glm4_moe" else (None, None))
    full = convert.hf_to_full(hf, shape)
    assert "decoder.layers.0.mlp.linear_fc1.weight" in full and "decoder.layers.1.mlp.router.expert_bias" in full
    assert "decoder.layers.0.mlp.router.expert_bias" not in full  # the dense first layer
    bias = "model.layers.2.mlp.e_score_correction_bias" if arch == "hy_v3" else "model.layers.2.mlp.gate.e_score_correction_bias"
    assert torch.equal(full["decoder.layers.2.mlp.router.expert_bias"], hf[bias])
    for ep in (1, 2):
        shards = {(0, 0, e): convert.split_for_rank(full, shape, 1, 0, 1, 0, ep, e) for e in range(ep)}
        back = convert.full_to_hf_dict(convert.merge_ranks(shards if ep > 1 else {(0, 0): shards[(0, 0, 0)]}, shape, 1, 1, ep), shape)
        assert set(back) == set(hf)
        for name, t in hf.items():
            assert torch.equal(back[name], t), (ep, name)


def _batch(model_dir):
    # rows without prompt padding: a query row with every key masked is computed differently by transformers and megatron
    step = make_step_batch(model_dir).index(torch.tensor([0, 4]))
    assert bool(step.tensors["attention_mask"][:, 0].all())
    return step


def test_log_probs_equal_transformers(sigmoid_model):
    from rl_train_megatron.engine import MegatronBackend

    arch, model_dir = sigmoid_model
    t = _batch(model_dir).tensors
    R = t["responses"].shape[1]
    b = MegatronBackend("actor", _config(model_dir), WorkerContext())
    try:
        assert len(b.model.decoder.layers) == 3 and not hasattr(b.model.decoder.layers[0].mlp, "router")
        with torch.no_grad():
            heads = b.forward(dict(t), temperature=1.0, with_entropy=True, entropy_grad=False, training=False)
    finally:
        b.release()
    hf = _reference(model_dir)
    with torch.no_grad():
        out = hf(input_ids=t["input_ids"], attention_mask=t["attention_mask"], position_ids=t["position_ids"])
    logits = out.logits[:, -R - 1 : -1].float()
    ref = torch.log_softmax(logits, -1).gather(-1, t["responses"].unsqueeze(-1)).squeeze(-1)
    mask = t["response_mask"].bool()
    torch.testing.assert_close(heads.log_probs[mask], ref[mask], atol=1e-5, rtol=1e-5)
    # the bias matters: routing without it gives other log-probs
    with torch.no_grad():
        for m in hf.modules():
            if hasattr(m, "e_score_correction_bias"):
                m.e_score_correction_bias.zero_()
        unbiased = hf(input_ids=t["input_ids"], attention_mask=t["attention_mask"], position_ids=t["position_ids"]).logits[:, -R - 1 : -1]
    assert not torch.allclose(torch.log_softmax(unbiased.float(), -1), torch.log_softmax(logits, -1), atol=1e-4)


def _hf_tokens_per_expert(hf, t, arch: str) -> list[torch.Tensor]:
    """Tokens each expert of each MoE layer received in transformers' forward of the whole batch (every position)."""
    counts, hooks = [], []

    def record(_module, _inputs, output):
        idx = output[2]  # (router logits, top-k weights, top-k indices)
        counts.append(torch.bincount(idx.reshape(-1), minlength=8).float())

    for name, m in hf.named_modules():
        if name.endswith("mlp.gate") and hasattr(m, "weight") and m.weight.dim() == 2 and m.weight.shape[0] == 8:
            hooks.append(m.register_forward_hook(record))
    try:
        with torch.no_grad():
            hf(input_ids=t["input_ids"], attention_mask=t["attention_mask"], position_ids=t["position_ids"])
    finally:
        for h in hooks:
            h.remove()
    return counts


def test_expert_bias_moves_by_sign_of_load_imbalance_after_a_step(sigmoid_model):
    """A training forward and backward, the gradient reduction and the optimizer step: each MoE layer's bias moved by
    rate x sign(mean load - load), the loads counted from transformers' routing of the same tokens; the exported
    e_score_correction_bias is the moved one; the bias took no optimizer update (no gradient)."""
    from rl_train_megatron import sigmoid_moe
    from rl_train_megatron.engine import MegatronBackend

    arch, model_dir = sigmoid_model
    rate = 0.01
    t = _batch(model_dir).tensors
    b = MegatronBackend("actor", _config(model_dir, rate=rate), WorkerContext())
    try:
        routers = sigmoid_moe.routers(b.model)
        assert len(routers) == 2 and all(not r.expert_bias.requires_grad for r in routers)
        before = [r.expert_bias.detach().clone() for r in routers]
        b.model.train()
        heads = b.forward(dict(t), temperature=1.0, with_entropy=False, entropy_grad=False, training=True)
        mask = t["response_mask"].float()
        b.zero_grad()
        b.backward(-(heads.log_probs * mask).sum() / mask.sum(), 1.0)
        counted = [r.local_tokens_per_expert.clone() for r in routers]
        b.reduce_and_clip(1.0)
        b.step()
        after = [r.expert_bias.detach().clone() for r in routers]
        left = [r.local_tokens_per_expert.clone() for r in routers]
        exported = {n: w.clone() for n, w in b.named_weights() if n.endswith("e_score_correction_bias")}
    finally:
        b.release()
    hf_counts = _hf_tokens_per_expert(_reference(model_dir), t, arch)
    assert len(hf_counts) == 2
    for mine, ref in zip(counted, hf_counts):
        assert torch.equal(mine, ref)
        assert ref.sum() == t["input_ids"].numel() * 2  # every position, 2 experts each
        assert len(set(ref.tolist())) > 1  # an imbalance to move the bias
    for b0, b1, ref in zip(before, after, hf_counts):
        expected = b0 + torch.sign(ref.mean() - ref) * rate
        torch.testing.assert_close(b1, expected, atol=0, rtol=0)
    assert all(not c.any() for c in left)  # the counts start again at the next step
    name = "mlp.e_score_correction_bias" if arch == "hy_v3" else "mlp.gate.e_score_correction_bias"
    assert torch.equal(exported[f"model.layers.1.{name}"], after[0]) and torch.equal(exported[f"model.layers.2.{name}"], after[1])


def test_rate_zero_keeps_the_checkpoint_bias(sigmoid_model):
    from rl_train_megatron import sigmoid_moe
    from rl_train_megatron.engine import MegatronBackend

    _, model_dir = sigmoid_model
    t = _batch(model_dir).tensors
    b = MegatronBackend("actor", _config(model_dir, rate=0.0), WorkerContext())
    try:
        before = [r.expert_bias.detach().clone() for r in sigmoid_moe.routers(b.model)]
        b.model.train()
        heads = b.forward(dict(t), temperature=1.0, with_entropy=False, entropy_grad=False, training=True)
        b.zero_grad()
        b.backward(heads.log_probs.sum(), 1.0)
        b.reduce_and_clip(1.0)
        b.step()
        assert all(torch.equal(x, r.expert_bias) for x, r in zip(before, sigmoid_moe.routers(b.model)))
        assert all(not r.local_tokens_per_expert.any() for r in sigmoid_moe.routers(b.model))
    finally:
        b.release()


def run_layout(rank: int, world: int, config, step) -> dict:
    from rl_train_megatron import sigmoid_moe
    from rl_train_megatron.engine import build_engine

    t = config.train
    mp = t.tensor_model_parallel_size * t.pipeline_model_parallel_size * t.context_parallel_size
    half = len(step) // (world // mp)
    replica = rank // mp
    mine = step.index(torch.arange(replica * half, (replica + 1) * half))
    actor = build_engine("actor", config, WorkerContext(rank=rank, world_size=world, seed=0))
    try:
        out = {"experts": sum(1 for n, _ in actor.backend.model.named_parameters() if ".local_experts." in n),
               "layers": len(actor.backend.model.decoder.layers)}
        out["log_probs"] = actor.compute_log_prob(mine, temperature=1.0)["log_probs"]
        out["metrics"] = actor.update(mine)
        out["metrics_2"] = actor.update(mine)
        out["weights_2"] = {n: w.detach().clone() for n, w in actor.named_weights()}
        out["bias"] = [r.expert_bias.detach().clone() for r in sigmoid_moe.routers(actor.backend.model)]
    finally:
        actor.shutdown()
    return out


@pytest.mark.dist
@pytest.mark.parametrize("layout", ["tp2", "ep2", "pp2", "cp2"])
def test_tp2_ep2_pp2_cp2_equal_one_process(sigmoid_model, layout):
    """TP 2 (sequence parallel: each rank's routers count half the tokens, the counts summed over TP x DP), EP 2 (2
    replicas, each its half of the step, 4 of the 8 experts per rank) or PP 2 (the dense layer on the first stage, the
    MoE layers on the second: megatron-core's block spec per stage) or CP 2 (each rank 2 of the 4 chunks of the sequence,
    the context-parallel attention in the dense and the MoE layers' specs): log-probs, loss, grad norm, and after two updates
    the weights and the moved bias equal one process's."""
    _, model_dir = sigmoid_model
    step = make_step_batch(model_dir)
    columns = step.tensors["input_ids"].shape[1]
    if columns % 4:  # TP 2 splits the columns, CP 2 into 4 chunks
        from test_megatron_moe import _left_padded

        step = _left_padded(step, columns + (-columns) % 4)
    one = run_layout(0, 1, _config(model_dir, rate=0.01), step)
    cfg = _config(model_dir, rate=0.01, **{layout[:2]: 2})
    two = run_distributed(run_layout, 2, cfg, step, timeout=400)
    experts = {"tp2": [2 * 8 * 2] * 2, "ep2": [2 * 4 * 2] * 2, "pp2": [0, 2 * 8 * 2], "cp2": [2 * 8 * 2] * 2}[layout]
    assert one["experts"] == 2 * 8 * 2 and [o["experts"] for o in two] == experts
    assert [o["layers"] for o in two] == ([1, 2] if layout == "pp2" else [3, 3])
    initial = [t for n, t in _reference(model_dir).named_buffers() if n.endswith("e_score_correction_bias")]
    for b, b0 in zip(one["bias"], initial, strict=True):  # two steps of +-0.01 (or 0 for an expert at the mean load)
        moved = ((b - b0) / 0.01).round()
        torch.testing.assert_close(b - b0, moved * 0.01, atol=1e-6, rtol=0)
        assert moved.abs().max() > 0 and moved.abs().max() <= 2
    for out in two:
        if layout != "ep2":
            torch.testing.assert_close(out["log_probs"], one["log_probs"], atol=1e-5, rtol=0)
        for key in ("loss", "grad_norm", "actor/pg_loss"):
            assert out["metrics"][key] == pytest.approx(one["metrics"][key], rel=1e-5, abs=1e-7), key
            assert out["metrics_2"][key] == pytest.approx(one["metrics_2"][key], rel=1e-5, abs=1e-7), key
        assert set(out["weights_2"]) == set(one["weights_2"])
        for name, w in one["weights_2"].items():
            torch.testing.assert_close(out["weights_2"][name], w, atol=1e-5, rtol=1e-5, msg=lambda m, name=name: f"{name}: {m}")
    if layout == "ep2":
        torch.testing.assert_close(torch.cat([two[0]["log_probs"], two[1]["log_probs"]]), one["log_probs"], atol=1e-5, rtol=0)


# ------------------------------------------------------------------- checks
def _problems(config) -> list:
    from rl_train_megatron.plugin import check_model_fields, check_parallel_sizes, check_transformer_config

    return check_model_fields(config) + check_parallel_sizes(config) + check_transformer_config(config)


def _with(cfg, model_dir, tc: dict, **override):
    model = attrs.evolve(cfg.model, path=str(model_dir), override_config=override or cfg.model.override_config)
    return attrs.evolve(cfg, model=model, train=attrs.evolve(cfg.train, name="megatron", options={"transformer_config": tc}))


def test_expert_bias_is_accepted_for_sigmoid_routers_and_refused_for_softmax_ones(tmp_path):
    from rl_core_testing.tiny_model import make_tiny_model_dir

    hy = make_sigmoid_model_dir(tmp_path / "hy", "hy_v3")
    qwen = make_tiny_model_dir(tmp_path / "qwen", "qwen3_moe", hidden=32, layers=2)
    cfg = default_config(hy)
    verl = {"moe_router_enable_expert_bias": True, "moe_router_bias_update_rate": 0, "moe_router_load_balancing_type": "none"}
    assert [p for p in _problems(_with(cfg, hy, verl)) if p.severity == "error"] == []
    bad = [p for p in _problems(_with(cfg, qwen, verl)) if p.severity == "error"]
    assert [p.key for p in bad] == ["train.options.transformer_config.moe_router_enable_expert_bias"]
    assert "softmax" in bad[0].what and "qwen3_moe" in bad[0].what and "remove" in bad[0].fix
    off = [p for p in _problems(_with(cfg, hy, {"moe_router_enable_expert_bias": False})) if p.severity == "error"]
    assert [p.key for p in off] == ["train.options.transformer_config.moe_router_enable_expert_bias"] and "e_score_correction_bias" in off[0].what
    scale = [p for p in _problems(_with(cfg, hy, {"moe_router_topk_scaling_factor": 1.0})) if p.severity == "error"]
    assert [p.key for p in scale] == ["train.options.transformer_config.moe_router_topk_scaling_factor"] and "2.5" in scale[0].what


def test_mtp_layers_and_unknown_config_fields_are_refused_by_name(tmp_path):
    from rl_train_megatron.model import UnsupportedModelError, model_shape

    with pytest.raises(UnsupportedModelError, match=r"num_nextn_predict_layers=1.*override_config\.num_nextn_predict_layers=0"):
        model_shape(sigmoid_config("glm4_moe", num_nextn_predict_layers=1))
    with pytest.raises(UnsupportedModelError, match=r"moe_layer_experimental"):
        model_shape(sigmoid_config("hy_v3", moe_layer_experimental=3))
    with pytest.raises(UnsupportedModelError, match=r"norm_topk_prob=false"):
        model_shape(sigmoid_config("glm4_moe", norm_topk_prob=False))
    with pytest.raises(UnsupportedModelError, match=r"num_experts_per_tok=1"):
        model_shape(sigmoid_config("hy_v3", num_experts_per_tok=1))
    with pytest.raises(UnsupportedModelError, match=r"n_group=2, topk_group=2"):
        model_shape(sigmoid_config("glm4_moe", topk_group=2))
    # the check reads the same config.json: the MTP layer refused before anything starts
    glm = make_sigmoid_model_dir(tmp_path / "glm", "glm4_moe")
    data = json.loads((glm / "config.json").read_text())
    data["num_nextn_predict_layers"] = 1
    (glm / "config.json").write_text(json.dumps(data))
    probs = [p for p in _problems(_with(default_config(glm), glm, {})) if p.severity == "error"]
    assert [p.key for p in probs] == ["model.path"] and "num_nextn_predict_layers=1" in probs[0].what
    assert not [p for p in _problems(_with(default_config(glm), glm, {}, num_nextn_predict_layers=0)) if p.severity == "error"]


# --------------------------------------------------------------------- e2e
@pytest.mark.slow
@pytest.mark.parametrize("arch", ARCHS)
def test_two_step_grpo_through_rlcore_train_exports_the_trained_weights(tmp_path, arch):
    """``rlcore train`` (GRPO, hf rollout, train.name=megatron, verl's Hy3 router keys with a moving bias) on a tiny HY-V3 / GLM-4-MoE:
    each step's rollout log-probs equal the actor's (the synced weights, bias included, are the trained ones); the final
    checkpoint's Megatron tensors converted to HF names are hf_final's, bit for bit; the bias moved by whole steps of the rate."""
    import os
    import shutil

    from safetensors.torch import load_file

    from rl_core_testing.bounded_run import communicate_bounded
    from rl_core_testing.tiny_run import read_metrics, write_tiny_run
    from rl_train_megatron import convert
    from rl_train_megatron.model import model_shape

    tc = {"moe_router_enable_expert_bias": True, "moe_router_bias_update_rate": 0.01, "moe_router_load_balancing_type": "none"}
    cfg = write_tiny_run(tmp_path, steps=2, train__name="megatron", train__options={"transformer_config": tc}, rollout__calculate_log_probs=True,
                         trainer__save_freq=2, trainer__val_before_train=False)
    shutil.rmtree(tmp_path / "model")
    make_sigmoid_model_dir(tmp_path / "model", arch)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.Popen([sys.executable, "-m", "rl_core", "train", str(cfg), "--no-progress"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)
    out = communicate_bounded(proc, timeout=600)
    assert proc.returncode == 0, out[-6000:]
    rows = read_metrics(tmp_path / "out")
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        assert row["rollout_corr/log_prob_abs_diff_max"] < 1e-3, row
    # (transformers writes HY-V3's checkpoint names on disk; in memory, and in hf_final, its model's own names)
    before = _reference(tmp_path / "model").state_dict()
    after = load_file(str(tmp_path / "out" / "hf_final" / "model.safetensors"))
    assert set(after) == set(before)
    reloaded = _reference(tmp_path / "out" / "hf_final").state_dict()  # transformers reads hf_final back, every tensor
    assert set(reloaded) == set(after) and all(torch.equal(reloaded[n], t) for n, t in after.items())
    from transformers import AutoConfig

    shape = model_shape(AutoConfig.from_pretrained(tmp_path / "model"))
    ckpt = torch.load(tmp_path / "out" / "checkpoints" / "global_step_2" / "actor" / "rank0.pt", weights_only=True)["model"]
    trained = convert.full_to_hf_dict(ckpt, shape)
    assert set(trained) == set(after)
    for name, t in trained.items():
        assert torch.equal(after[name], t), name
    biases = [n for n in after if n.endswith("e_score_correction_bias")]
    assert len(biases) == 2
    for n in biases:
        moved = ((after[n] - before[n]) / 0.01).round()
        torch.testing.assert_close(after[n] - before[n], moved * 0.01, atol=1e-6, rtol=0)
        assert moved.abs().max() > 0
    assert not torch.equal(after["model.layers.1.mlp.gate.weight"], before["model.layers.1.mlp.gate.weight"])


def test_engine_refuses_expert_bias_on_a_softmax_router(tmp_path):
    """Without the check (config.json unread when checked), the engine refuses it when it builds the model, by key."""
    from rl_core_testing.tiny_model import make_tiny_model_dir
    from rl_train_megatron.engine import MegatronBackend
    from rl_train_megatron.model import UnsupportedModelError

    qwen = make_tiny_model_dir(tmp_path / "qwen", "qwen3_moe", hidden=32, layers=2)
    with pytest.raises(UnsupportedModelError, match=r"transformer_config\.moe_router_enable_expert_bias: is true.*softmax"):
        MegatronBackend("actor", _config(qwen), WorkerContext())
    hy = make_sigmoid_model_dir(tmp_path / "hy", "hy_v3")
    cfg = _config(hy)
    cfg = attrs.evolve(cfg, train=attrs.evolve(cfg.train, options={"transformer_config": {"moe_router_enable_expert_bias": False}}))
    with pytest.raises(UnsupportedModelError, match=r"moe_router_enable_expert_bias: is False.*e_score_correction_bias"):
        MegatronBackend("actor", cfg, WorkerContext())
