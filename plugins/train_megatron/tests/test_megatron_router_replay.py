"""MoE routing replay (``actor.router_replay`` R2 / R3) in the megatron backend (rl_train_megatron.router_replay); tiny
models built from a config, no downloads.

- one process, Qwen3-MoE (renormalised top-k) and Qwen2-MoE (top-k of the full softmax, shared expert): R2's recording
  of the old-log-prob pass is transformers' own routing of the same tokens; replaying it gives log-probs bit-identical
  to the unreplayed forward; replaying a random routing (some tokens -1: native) gives transformers' log-probs under
  rl_routing_replay.replay's replay of the same routing, and the routers' gradients equal transformers' under it;
- HY-V3 / GLM-4-MoE (sigmoid routers, expert bias, GLM's group-limited choice): own routing bit-identical; a replay that
  routes every token of a layer to one set of experts equals the native forward with an expert bias that forces that
  set (the bias only chooses: the weights are the unbiased scores in both);
- TP 2 (sequence parallel), EP 2, PP 2 and CP 2 on 2 gloo processes each: the recording and the replayed log-probs
  equal one process's;
- a batch whose routed_experts do not fit the model is refused by key; R3 without routed_experts is refused;
- 2-step ``rlcore train`` GRPO with train.name=megatron under R2 and under R3 (hf rollout recording the routing).
"""

from __future__ import annotations

import attrs
import pytest
import torch

pytest.importorskip("megatron.core", reason="needs megatron-core (pip install megatron-core==0.16.1)")

from rl_core.backends import WorkerContext  # noqa: E402
from rl_routing_replay.replay import RouterReplay  # noqa: E402
from rl_core_testing.distributed import run_distributed  # noqa: E402
from rl_core_testing.rollout_conformance import reference_model  # noqa: E402
from rl_core_testing.tiny_model import make_tiny_model_dir  # noqa: E402
from rl_core_testing.train_conformance import default_config, make_step_batch  # noqa: E402

pytestmark = pytest.mark.megatron


def _config(model_dir, mode: str = "R2", *, tp: int = 1, ep: int = 1, pp: int = 1, cp: int = 1, vpp: int | None = None):
    cfg = default_config(model_dir)
    tc = {"moe_router_dtype": "fp32"}
    if tp > 1:
        tc["sequence_parallel"] = True
    train = attrs.evolve(cfg.train, name="megatron", tensor_model_parallel_size=tp, expert_model_parallel_size=ep, pipeline_model_parallel_size=pp,
                         context_parallel_size=cp, expert_tensor_parallel_size=1 if ep > 1 else None,
                         options={"transformer_config": tc, **({"virtual_pipeline_model_parallel_size": vpp} if vpp else {})})
    return attrs.evolve(cfg, train=train, actor=attrs.evolve(cfg.actor, router_replay=mode))


def _inputs(step) -> dict[str, torch.Tensor]:
    t = step.tensors
    return {k: t[k] for k in ("input_ids", "attention_mask", "position_ids", "responses", "response_mask")}


def _forward(b, x: dict, training: bool = False):
    return b.forward(dict(x), temperature=1.0, with_entropy=False, entropy_grad=False, training=training)


def _random_routing(shape: tuple, experts: int, top_k: int, mask: torch.Tensor, seed: int = 1) -> torch.Tensor:
    """``[b, S, layers, k]``: k distinct random experts per token and layer; padding and every 5th real token -1 (native)."""
    g = torch.Generator().manual_seed(seed)
    b, S, L = shape
    out = torch.stack([torch.randperm(experts, generator=g)[:top_k] for _ in range(b * S * L)]).view(b, S, L, top_k).to(torch.int16)
    out[~mask.bool()] = -1
    out.view(b * S, L, top_k)[::5] = -1
    return out


def _hf_log_probs(hf, x: dict) -> torch.Tensor:
    R = x["responses"].shape[1]
    logits = hf(input_ids=x["input_ids"], attention_mask=x["attention_mask"], position_ids=x["position_ids"]).logits
    return torch.log_softmax(logits[:, -R - 1 : -1].float(), -1).gather(-1, x["responses"].unsqueeze(-1)).squeeze(-1)


@pytest.fixture(scope="module", params=["qwen3_moe", "qwen2_moe"])
def softmax_moe(request, tmp_path_factory):
    return make_tiny_model_dir(tmp_path_factory.mktemp(request.param), request.param, hidden=32, layers=2, seed=0)


def test_r2_records_transformers_routing_and_a_replay_equals_transformers_under_the_same_routing(softmax_moe):
    from rl_train_megatron import convert
    from rl_train_megatron.engine import MegatronBackend

    step = make_step_batch(softmax_moe)
    x = _inputs(step)
    mask, resp = x["attention_mask"].bool(), x["response_mask"].bool()
    b = MegatronBackend("actor", _config(softmax_moe), WorkerContext())
    try:
        native = _forward(b, x)
        recorded = native.routed_experts
        own = _forward(b, {**x, "routed_experts": recorded})
        routed = _random_routing(tuple(recorded.shape[:3]), b.shape.experts, b.shape.topk, mask)
        replayed = _forward(b, {**x, "routed_experts": routed})
        b.model.train()
        heads = _forward(b, {**x, "routed_experts": routed}, training=True)
        loss = -(heads.log_probs * resp).sum() / resp.sum()
        b.zero_grad()
        b.backward(loss, 1.0)
        grads = convert.full_to_hf_dict({n: p.grad for n, p in b.model.named_parameters()}, b.shape)
    finally:
        b.release()
    hf = reference_model(softmax_moe)
    rr = RouterReplay(hf)
    with rr.recording():
        ref_native = _hf_log_probs(hf, x)
    ref_routed = rr.recorded_layout(x["attention_mask"])
    assert recorded.dtype == torch.int16 and recorded.shape == ref_routed.shape == (*x["input_ids"].shape, 2, 2)
    assert bool((recorded[~mask] == -1).all()) and bool((recorded[mask] >= 0).all())
    assert torch.equal(recorded.sort(-1).values, ref_routed.sort(-1).values)  # the same experts per token (order aside)
    torch.testing.assert_close(native.log_probs[resp], ref_native[resp], atol=1e-5, rtol=0)
    assert torch.equal(own.log_probs, native.log_probs)  # its own routing replayed: bit for bit
    with rr.replaying(routed, x["attention_mask"]):
        ref_replayed = _hf_log_probs(hf, x)
        ref_loss = -(ref_replayed * resp).sum() / resp.sum()
        ref_loss.backward()
    assert (replayed.log_probs - native.log_probs)[resp].abs().max() > 1e-3  # another routing changes the log-probs
    torch.testing.assert_close(replayed.log_probs[resp], ref_replayed[resp].detach(), atol=1e-5, rtol=0)
    torch.testing.assert_close(heads.log_probs.detach()[resp], ref_replayed[resp].detach(), atol=1e-5, rtol=0)
    ref_grads = dict(hf.named_parameters())
    for name in [n for n in grads if n.endswith("mlp.gate.weight")]:  # the routers get their gradient through the replayed weights
        assert grads[name].abs().max() > 0
        torch.testing.assert_close(grads[name], ref_grads[name].grad, atol=2e-5, rtol=1e-4, msg=lambda m, name=name: f"{name}: {m}")


def test_bad_routed_experts_and_r3_without_them_are_refused_by_key(softmax_moe):
    from rl_train_megatron.engine import MegatronBackend
    from rl_train_megatron.router_replay import RouterReplayError

    x = _inputs(make_step_batch(softmax_moe))
    b = MegatronBackend("actor", _config(softmax_moe, "R3"), WorkerContext())
    try:
        with pytest.raises(RouterReplayError, match=r"actor.router_replay=R3 but the batch has no routed_experts"):
            _forward(b, x)
        S = x["input_ids"].shape[1]
        with pytest.raises(RouterReplayError, match=rf"actor.router_replay: routed_experts has shape .*\[8, {S}, 2, 2\]"):
            _forward(b, {**x, "routed_experts": torch.zeros(8, S - 1, 2, 2, dtype=torch.int16)})
        with pytest.raises(RouterReplayError, match=r"actor.router_replay: routed_experts holds expert 4 .* experts 0..3"):
            _forward(b, {**x, "routed_experts": torch.full((8, S, 2, 2), 4, dtype=torch.int16)})
    finally:
        b.release()


# ------------------------------------------------------------------- sigmoid routers
@pytest.fixture(scope="module", params=["hy_v3", "glm4_moe"])
def sigmoid_moe(request, tmp_path_factory):
    from test_megatron_sigmoid_moe import make_sigmoid_model_dir

    return make_sigmoid_model_dir(tmp_path_factory.mktemp(request.param), request.param)


def test_sigmoid_routers_replay_with_unbiased_weights(sigmoid_moe):
    """Layer l's tokens all replayed to one expert set; the reference is the native forward with that set's bias raised
    by 100 (it then chooses them, GLM's group limit included; the weights are the unbiased scores either way)."""
    from rl_train_megatron.engine import MegatronBackend

    x = _inputs(make_step_batch(sigmoid_moe))
    b = MegatronBackend("actor", _config(sigmoid_moe), WorkerContext())
    try:
        native = _forward(b, x)
        own = _forward(b, {**x, "routed_experts": native.routed_experts})
        L, k = b.shape.layers, b.shape.topk
        sets = {1: [5, 6], 2: [1, 3]}  # (layer 0 is dense; GLM: experts 0-3 / 4-7 are its 2 groups, one kept per token)
        routed = torch.full((*x["input_ids"].shape, L, k), -1, dtype=torch.int16)
        for layer, chosen in sets.items():
            routed[:, :, layer] = torch.tensor(chosen, dtype=torch.int16)
        replayed = _forward(b, {**x, "routed_experts": routed})
        assert bool((native.routed_experts[:, :, 0] == -1).all())  # the dense layer routes nothing
        routers = {r.layer_number - 1: r for r in b.model.modules() if type(r).__name__ == "TopKRouter"}
        with torch.no_grad():
            for layer, chosen in sets.items():
                routers[layer].expert_bias[chosen] += 100.0
        b.router_replay.stop()
        b.router_replay = None  # the native forward under the forcing bias
        forced = _forward(b, x)
    finally:
        b.release()
    resp = x["response_mask"].bool()
    assert torch.equal(own.log_probs, native.log_probs)
    assert (replayed.log_probs - native.log_probs)[resp].abs().max() > 1e-4  # (small experts: a small but clear change)
    torch.testing.assert_close(replayed.log_probs[resp], forced.log_probs[resp], atol=2e-6, rtol=0)


# ------------------------------------------------------------------- layouts
def run_layout(rank: int, world: int, config, step, routed, uneven: bool = False) -> dict:
    """``uneven``: the last replica's share one row short (its last micro-batch is padded with rows for the EP group)."""
    from rl_train_megatron.engine import build_engine

    t = config.train
    mp = t.pipeline_model_parallel_size * t.tensor_model_parallel_size * t.context_parallel_size
    replicas = world // mp
    rows = len(step) // replicas
    sel = torch.arange((rank // mp) * rows, (rank // mp + 1) * rows)
    if uneven and rank // mp == replicas - 1:
        sel = sel[:-1]
    mine = step.index(sel)
    actor = build_engine("actor", config, WorkerContext(rank=rank, world_size=world, seed=0))
    try:
        out = actor.compute_log_prob(mine, temperature=1.0)
        mine.tensors["routed_experts"] = routed[sel]
        replayed = actor.compute_log_prob(mine, temperature=1.0)
    finally:
        actor.shutdown()
    return {"rows": sel, "recorded": out["routed_experts"], "log_probs": out["log_probs"], "replayed": replayed["log_probs"]}


@pytest.fixture(scope="module")
def qwen3_moe(tmp_path_factory):
    return make_tiny_model_dir(tmp_path_factory.mktemp("qwen3_moe"), "qwen3_moe", hidden=32, layers=4, seed=0)  # (4: PP 2 x VPP 2)


@pytest.fixture(scope="module")
def one_process(qwen3_moe):
    step = make_step_batch(qwen3_moe)
    t = step.tensors
    routed = _random_routing((*t["input_ids"].shape, 4), 4, 2, t["attention_mask"])
    return step, routed, run_layout(0, 1, _config(qwen3_moe), step, routed)


@pytest.mark.dist
@pytest.mark.parametrize("layout", [dict(tp=2), dict(ep=2), dict(ep=2, uneven=True), dict(pp=2), dict(pp=2, vpp=2), dict(cp=2),
                                    dict(tp=2, cp=2, ep=2)],
                         ids=["tp2_sp", "ep2", "ep2_padded_rows", "pp2", "pp2_vpp2", "cp2", "cp2_tp2_sp_ep2"])
def test_layouts_record_and_replay_as_one_process(qwen3_moe, one_process, layout):
    """Each layout's recording (R2) is one process's bit for bit and its replay of a random routing gives one process's
    log-probs: sequence parallelism (TP 2: each rank routes half the columns), expert parallelism (2 replicas; with one
    replica a row short, the EP group's padded rows route natively), pipeline stages (2 layers each; with virtual stages a layer per model chunk), context parallelism
    (zig-zag chunks, right-padded), and CP 2 x TP 2 x EP 2 on 4 processes."""
    step, routed, one = one_process
    assert (one["replayed"] - one["log_probs"]).abs().max() > 1e-3
    layout = dict(layout)
    uneven = layout.pop("uneven", False)
    config = _config(qwen3_moe, **layout)
    if uneven:  # micro-batches of 2 rows: 4 rows -> 2 + 2, 3 rows -> 2 + 1 (+ 1 padded row)
        config = attrs.evolve(config, actor=attrs.evolve(config.actor, log_prob_micro_batch_size_per_gpu=2))
    world = 4 if len(layout) == 3 else 2
    outs = run_distributed(run_layout, world, config, step, routed, uneven, timeout=400)
    for out in outs:
        sel = out["rows"]
        assert torch.equal(out["recorded"], one["recorded"][sel])
        torch.testing.assert_close(out["log_probs"], one["log_probs"][sel], atol=1e-5, rtol=0)
        torch.testing.assert_close(out["replayed"], one["replayed"][sel], atol=1e-5, rtol=0)


# ------------------------------------------------------------------- the engine's passes
def test_r3_replays_the_hf_rollouts_routing(tmp_path):
    """The hf rollout records its routing (rollout.return_routed_experts); the megatron actor's log-probs under R3 are the
    rollout's own, and forcing other experts moves them (the replay decides the routing)."""
    from rl_core_testing.routing_replay import assert_r3_replays_the_rollout, r3_rollout_batch
    from rl_train_megatron.engine import build_engine

    path = make_tiny_model_dir(tmp_path / "m", "qwen3_moe", hidden=32, layers=2, seed=0)
    cfg = _config(path, "R3")
    cfg = attrs.evolve(cfg, rollout=attrs.evolve(cfg.rollout, return_routed_experts=True))
    batch = r3_rollout_batch(cfg, path)
    actor = build_engine("actor", cfg, WorkerContext())
    try:
        assert_r3_replays_the_rollout(actor, batch, experts=4)
    finally:
        actor.shutdown()


def test_r2_update_replays_the_recorded_routing_through_activation_recompute(tmp_path):
    """R2: the old-log-prob pass records; the update routes every token to the batch's experts, in the forward and in
    the backward's recomputation (model.enable_gradient_checkpointing: each layer recomputed, its router replaying the
    same targets): the update's loss and gradient norm equal the run without recomputation, and differ from an update
    under the recorded (own) routing."""
    from rl_train_megatron.engine import build_engine

    path = make_tiny_model_dir(tmp_path / "m", "qwen3_moe", hidden=32, layers=2, seed=0)
    step = make_step_batch(path)
    runs = {}
    for ckpt, shift in ((False, 0), (False, 1), (True, 1)):
        cfg = _config(path, "R2")
        cfg = attrs.evolve(cfg, model=attrs.evolve(cfg.model, enable_gradient_checkpointing=ckpt),
                           actor=attrs.evolve(cfg.actor, ppo_epochs=1), critic=attrs.evolve(cfg.critic, enable=False))
        actor = build_engine("actor", cfg, WorkerContext())
        try:
            batch = step.index(torch.arange(len(step)))
            routed = actor.compute_log_prob(batch)["routed_experts"]
            real = batch["attention_mask"].bool()
            forced = routed.clone()
            forced[real] = (forced[real] + shift) % 4
            batch["routed_experts"] = forced
            calls = []
            for _, r in actor.backend.router_replay.routers:
                plain = r.router_replay.get_replay_topk
                r.router_replay.get_replay_topk = lambda *a, plain=plain, **k: calls.append(1) or plain(*a, **k)
            runs[(ckpt, shift)] = (actor.update(batch), len(calls))
            assert all(r.router_replay.target is None for _, r in actor.backend.router_replay.routers)  # dropped after the backward
        finally:
            actor.shutdown()
    (own, n_own), (plain, n_plain), (recomputed, n_recomputed) = runs[(False, 0)], runs[(False, 1)], runs[(True, 1)]
    assert n_recomputed == 2 * n_plain == 2 * n_own  # the backward's recomputation ran every router again
    for k in ("loss", "grad_norm"):
        assert recomputed[k] == pytest.approx(plain[k], rel=1e-6), k
    assert abs(plain["grad_norm"] - own["grad_norm"]) > 1e-4 * own["grad_norm"]


# ------------------------------------------------------------------- e2e
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["R2", "R3"])
def test_two_step_grpo_through_rlcore_train(tmp_path, mode):
    """``rlcore train`` (GRPO, hf rollout, train.name=megatron, tiny Qwen3-MoE) under actor.router_replay: 2 steps, the plan
    names the replay; R3 (the hf rollout records its routing): each step's old log-probs are the rollout's own."""
    import os
    import subprocess
    import sys

    from rl_core_testing.bounded_run import communicate_bounded
    from rl_core_testing.tiny_run import read_metrics, write_tiny_run

    extra = {"rollout__return_routed_experts": True} if mode == "R3" else {}
    cfg = write_tiny_run(tmp_path, steps=2, model={"arch": "qwen3_moe"}, train__name="megatron", actor__router_replay=mode,
                         rollout__calculate_log_probs=True, trainer__val_before_train=False, **extra)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.Popen([sys.executable, "-m", "rl_core", "train", str(cfg), "--no-progress"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)
    out = communicate_bounded(proc, timeout=600)
    assert proc.returncode == 0, out[-6000:]
    assert f"MoE routing replay: {mode}: the " in out
    rows = read_metrics(tmp_path / "out")
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        assert row["actor/grad_norm"] > 0
        if mode == "R3":  # the actor replays the rollout's routing: its log-probs are the rollout's (fp32, same weights)
            assert row["rollout_corr/log_prob_abs_diff_max"] < 1e-4, row


def test_what_cannot_be_replayed_is_refused_by_key(tmp_path):
    from rl_train_megatron.engine import MegatronBackend
    from rl_train_megatron.plugin import check_router_replay
    from rl_train_megatron.router_replay import RouterReplayError

    path = make_tiny_model_dir(tmp_path / "m", "qwen3_moe", hidden=32, layers=2, seed=0)
    cfg = _config(path, "R2")
    cfg = attrs.evolve(cfg, train=attrs.evolve(cfg.train, options={"transformer_config": {"moe_router_load_balancing_type": "sinkhorn"}}))
    problems = check_router_replay(cfg)
    assert [p.key for p in problems] == ["train.options.transformer_config.moe_router_load_balancing_type"]
    assert "actor.router_replay=disabled" in problems[0].fix
    assert check_router_replay(attrs.evolve(cfg, actor=attrs.evolve(cfg.actor, router_replay="disabled"))) == []
    with pytest.raises(RouterReplayError, match=r"actor.router_replay=R2: train.options.transformer_config.moe_router_load_balancing_type=sinkhorn"):
        MegatronBackend("actor", cfg, WorkerContext())
    dense = make_tiny_model_dir(tmp_path / "d", "qwen3", hidden=32, layers=2, seed=0)
    with pytest.raises(RouterReplayError, match="actor.router_replay=R2: the qwen3 model has no MoE routers to replay; set it to disabled"):
        MegatronBackend("actor", _config(dense, "R2"), WorkerContext())
    MegatronBackend("ref", _config(dense, "R2"), WorkerContext()).release()  # (the reference routes natively: nothing to check)
