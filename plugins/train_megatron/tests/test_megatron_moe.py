"""MoE models on the megatron backend (tiny Qwen2-MoE / Qwen3-MoE built from a config, no downloads).

- HF -> Megatron (experts split over EP ranks) -> HF gives back every tensor bit for bit;
- one process: a Qwen3-MoE backward equals transformers' on the same loss, with megatron-core's router aux and z
  losses computed independently from transformers' router logits (their gradients enter through megatron's scaler);
- TP 2 under Megatron sequence parallelism on 2 gloo processes equals one process (same checks);
- TP 2 x expert TP 1 x EP 2 x PP 2 on 4 gloo processes equals one process, and resumes from its checkpoint exactly;
- CP 2 x TP 2 (sequence parallel) x expert TP 1 x EP 2 on 4 gloo processes equals one process;
- EP 2 x PP 2 with uneven stages (1 + 2 layers) on 4 gloo processes (each replica its half of the step: data parallel
  2; an EP group joins the same stage of both replicas) equals one process: loss, gradient norm, router-loss metrics,
  log-probs and the weights after the update.
"""

from __future__ import annotations

import attrs
import pytest
import torch

pytest.importorskip("megatron.core", reason="needs megatron-core (pip install megatron-core==0.16.1)")

from rl_core.backends import WorkerContext  # noqa: E402
from rl_core_testing.distributed import run_distributed  # noqa: E402
from rl_core_testing.rollout_conformance import reference_model  # noqa: E402
from rl_core_testing.tiny_model import make_tiny_model_dir  # noqa: E402
from rl_core_testing.train_conformance import PROMPTS_PER_STEP, default_config, make_step_batch  # noqa: E402

pytestmark = pytest.mark.megatron

AUX, Z = 0.01, 0.001  # megatron's moe_aux_loss_coeff / moe_z_loss_coeff in the engine tests


def _config(model_dir, ep: int = 1, pp: int = 1, first_stage: int | None = None, tp: int = 1, etp: int | None = None, cp: int = 1):
    cfg = default_config(model_dir)
    # one mini-batch: each replica's half of the step then makes the same global mini-batch as one process's whole step
    cfg = attrs.evolve(cfg, actor=attrs.evolve(cfg.actor, ppo_epochs=1, use_kl_loss=False, entropy_coeff=0.0, ppo_mini_batch_size=PROMPTS_PER_STEP))
    tc = {"moe_aux_loss_coeff": AUX, "moe_z_loss_coeff": Z, "moe_router_dtype": "fp32"}
    if first_stage is not None:
        tc["num_layers_in_first_pipeline_stage"] = first_stage
    if tp > 1:  # MoE layers with TP > 1 train under Megatron sequence parallelism
        tc["sequence_parallel"] = True
    train = attrs.evolve(cfg.train, name="megatron", expert_model_parallel_size=ep, pipeline_model_parallel_size=pp, tensor_model_parallel_size=tp,
                         expert_tensor_parallel_size=etp, context_parallel_size=cp, options={"transformer_config": tc})
    return attrs.evolve(cfg, train=train)


@pytest.fixture(scope="module")
def qwen3_moe(tmp_path_factory):
    # 3 layers: two pipeline stages split them unevenly (1 + 2)
    return make_tiny_model_dir(tmp_path_factory.mktemp("qwen3_moe"), "qwen3_moe", hidden=32, layers=3, seed=0)


@pytest.mark.parametrize("arch", ["qwen3_moe", "qwen2_moe"])
def test_conversion_round_trip_with_experts_split_over_ep_ranks(arch):
    from transformers import AutoModelForCausalLM

    from rl_core_testing.tiny_model import tiny_config
    from rl_train_megatron import convert
    from rl_train_megatron.model import model_shape

    cfg = tiny_config(arch, hidden=32, layers=2)
    torch.manual_seed(0)
    hf = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).state_dict()
    hf = {k: torch.randn_like(v) for k, v in hf.items()}  # every tensor distinct: a swapped expert or half shows
    shape = model_shape(cfg)
    assert shape.moe and (shape.shared_ffn > 0) == (arch == "qwen2_moe") and shape.norm_topk == (arch == "qwen3_moe")
    full = convert.hf_to_full(hf, shape)
    for ep in (1, 2, 4):
        shards = {(0, 0, e): convert.split_for_rank(full, shape, 1, 0, 1, 0, ep, e) for e in range(ep)}
        assert sum(k.endswith("local_experts.0.linear_fc1.weight") for k in shards[(0, 0, 0)]) == shape.layers
        assert not any(f"local_experts.{4 // ep}." in k for k in shards[(0, 0, 0)])  # only this rank's experts
        back = convert.full_to_hf_dict(convert.merge_ranks(shards if ep > 1 else {(0, 0): shards[(0, 0, 0)]}, shape, 1, 1, ep), shape)
        assert set(back) == set(hf)
        for name, t in hf.items():
            assert torch.equal(back[name], t), (ep, name)
    # experts split over EP 2 on each of 2 pipeline stages (layer 0 | layer 1)
    staged = attrs.evolve(shape, stages=(1, 1))
    shards = {(0, p, e): convert.split_for_rank(full, staged, 1, 0, 2, p, 2, e) for p in range(2) for e in range(2)}
    assert all(sum(k.endswith("local_experts.0.linear_fc1.weight") for k in shards[(0, p, 0)]) == 1 for p in range(2))
    back = convert.full_to_hf_dict(convert.merge_ranks(shards, staged, 1, 2, 2), staged)
    assert set(back) == set(hf) and all(torch.equal(back[n], t) for n, t in hf.items())


def _reference_loss(hf, t, R: int, mask: torch.Tensor):
    """transformers' forward: the masked mean response log-prob, plus megatron-core's router losses computed here from
    transformers' router logits (switch aux loss: coeff * E / (k * T^2) * sum_e tokens_e * sum_t p_te per layer, with the
    softmax over all experts; z loss: coeff * mean_t logsumexp_t^2)."""
    out = hf(input_ids=t["input_ids"], attention_mask=t["attention_mask"], position_ids=t["position_ids"], output_router_logits=True)
    logp = torch.log_softmax(out.logits[:, -R - 1 : -1].float(), -1).gather(-1, t["responses"].unsqueeze(-1)).squeeze(-1)
    main = -(logp * mask).sum() / mask.sum()
    E, k = hf.config.num_experts, hf.config.num_experts_per_tok
    aux_terms, z_terms = [], []
    for logits in out.router_logits:  # [T, E] per layer
        probs = torch.softmax(logits.float(), -1)
        counts = torch.zeros(E).index_add_(0, probs.topk(k, -1).indices.reshape(-1), torch.ones(probs.shape[0] * k))
        T = probs.shape[0]
        aux_terms.append(E / (k * T * T) * (counts * probs.sum(0)).sum())
        z_terms.append(torch.logsumexp(logits.float(), -1).pow(2).mean())
    aux, z = torch.stack(aux_terms), torch.stack(z_terms)
    return main, main + AUX * aux.sum() + Z * z.sum(), aux.mean(), z.mean()


def test_backward_equals_transformers_with_router_losses(qwen3_moe):
    from rl_train_megatron import convert
    from rl_train_megatron.engine import MegatronBackend

    cfg = _config(qwen3_moe)
    # rows without prompt padding (make_step_batch left-pads rows i % 4 > 0): a query row with every key masked is computed
    # differently by transformers and megatron, and the router losses count every position (no padding mask: megatron-core
    # 0.16.1 reads its MoE padding mask one way in the aux loss and the other way in the z loss)
    step = make_step_batch(qwen3_moe).index(torch.tensor([0, 4]))
    t = step.tensors
    assert bool(t["attention_mask"][:, 0].all())
    R = t["responses"].shape[1]
    mask = t["response_mask"].float()
    b = MegatronBackend("actor", cfg, WorkerContext())
    try:
        b.model.train()
        heads = b.forward(dict(t), temperature=1.0, with_entropy=False, entropy_grad=False, training=True)
        main = -(heads.log_probs * mask).sum() / mask.sum()
        b.zero_grad()
        b.backward(main, 0.5)  # a micro-batch's weight: the router losses' gradients must carry it too (megatron's scaler)
        grads = convert.full_to_hf_dict({n: p.grad for n, p in b.model.named_parameters()}, b.shape)
        b.reduce_and_clip(None)
        metrics = b.step_metrics()
    finally:
        b.release()
    hf = reference_model(qwen3_moe)
    ref_main, ref_total, ref_aux, ref_z = _reference_loss(hf, t, R, mask)
    (0.5 * ref_total).backward()
    torch.testing.assert_close(main.detach(), ref_main.detach(), atol=1e-5, rtol=1e-5)
    ref_grads = {n: p.grad for n, p in hf.named_parameters()}
    assert set(grads) == set(ref_grads) - {"lm_head.weight"} | ({"lm_head.weight"} if "lm_head.weight" in grads else set())
    # transformers' embedding never updates its padding_idx row (the pad token); megatron's does, and the padded response
    # positions enter the router losses: that row is left out
    grads["model.embed_tokens.weight"] = grads["model.embed_tokens.weight"][1:]
    ref_grads["model.embed_tokens.weight"] = ref_grads["model.embed_tokens.weight"][1:]
    for name, g in grads.items():
        torch.testing.assert_close(g, ref_grads[name], atol=2e-5, rtol=1e-4, msg=lambda m, name=name: f"{name}: {m}")
    # the routers' gradients come from the main loss and from both router losses: without them they would differ
    assert metrics["actor/moe/load_balancing_loss"] == pytest.approx(float(ref_aux), rel=1e-5)
    assert metrics["actor/moe/z_loss"] == pytest.approx(float(ref_z), rel=1e-5)


def run_ep(rank: int, world: int, config, step, workdir: str | None = None, zero: bool = True) -> dict:
    """The plain run; with ``workdir`` also the distributed optimizer (train.distributed_optimizer) on the same layout:
    an update, a checkpoint, a second update, and a fresh engine that resumes from the checkpoint and does the second.
    ``zero=False``: the plain run itself saves its checkpoint after the first update, and a fresh engine resumes from it."""
    from rl_train_megatron.engine import build_engine

    t = config.train
    mp = t.pipeline_model_parallel_size * t.tensor_model_parallel_size * t.context_parallel_size  # a replica's ranks are consecutive
    half = len(step) // (world // mp)  # (the controller's dispatch)
    replica = rank // mp
    mine = step.index(torch.arange(replica * half, (replica + 1) * half))
    ctx = WorkerContext(rank=rank, world_size=world, seed=0)
    actor = build_engine("actor", config, ctx)
    try:
        model = actor.backend.model
        out = {"experts": sum(1 for n, _ in model.named_parameters() if ".local_experts." in n),
               "layers": sum(len(chunk.decoder.layers) for chunk in actor.backend.chunks),  # (virtual stages: several model chunks)
               "fc1": [tuple(p.shape) for n, p in model.named_parameters() if n.endswith("local_experts.0.linear_fc1.weight")][0],
               "layout": (actor.backend.topo.tp, actor.backend.topo.cp, actor.backend.topo.ep, actor.backend.topo.etp, actor.backend.sp)}
        out["log_probs"] = actor.compute_log_prob(mine, temperature=1.0)["log_probs"]
        out["metrics"] = actor.update(mine)
        out["weights"] = {n: w.detach().clone() for n, w in actor.named_weights()}
        if workdir is not None and not zero:
            actor.save_checkpoint(f"{workdir}/plain")
        out["metrics_2"] = actor.update(mine)
        out["weights_2"] = {n: w.detach().clone() for n, w in actor.named_weights()}
    finally:
        actor.shutdown()
    if workdir is None:
        return out
    if not zero:
        actor = build_engine("actor", config, ctx)
        try:
            actor.load_checkpoint(f"{workdir}/plain")
            out["resumed_metrics_2"] = actor.update(mine)
            out["resumed_weights_2"] = {n: w.detach().clone() for n, w in actor.named_weights()}
        finally:
            actor.shutdown()
        return out
    zcfg = attrs.evolve(config, train=attrs.evolve(config.train, distributed_optimizer=True))
    ckpt = f"{workdir}/zero"
    actor = build_engine("actor", zcfg, ctx)
    try:
        b = actor.backend
        out["owned"] = [id(p) for p in b.zero.owned]
        out["trainable"] = [(n, id(p), p.numel()) for n, p in b.model.named_parameters() if p.requires_grad]
        out["zero_metrics"] = actor.update(mine)
        out["zero_weights"] = {n: w.detach().clone() for n, w in actor.named_weights()}
        out["zero_state_tensors"] = len(b.optimizer.state)
        actor.save_checkpoint(ckpt)
        out["zero_metrics_2"] = actor.update(mine)
        out["zero_weights_2"] = {n: w.detach().clone() for n, w in actor.named_weights()}
    finally:
        actor.shutdown()
    actor = build_engine("actor", zcfg, ctx)
    try:
        actor.load_checkpoint(ckpt)
        out["resumed_metrics_2"] = actor.update(mine)
        out["resumed_weights_2"] = {n: w.detach().clone() for n, w in actor.named_weights()}
    finally:
        actor.shutdown()
    return out


def _left_padded(step, columns: int):
    """The step with masked columns added on the left of its sequences (the same positions for every rank layout)."""
    from rl_core.batch import Batch

    extra = columns - step.tensors["input_ids"].shape[1]
    pad = lambda k, v: torch.nn.functional.pad(v, (extra, 0)) if k in ("input_ids", "attention_mask", "position_ids", "prompts") else v  # noqa: E731
    return Batch({k: pad(k, v) for k, v in step.tensors.items()}, {k: list(v) for k, v in step.non_tensors.items()}, dict(step.meta))


@pytest.fixture(scope="module")
def moe_step(qwen3_moe):
    """The step every layout below is compared on: 16 columns (2 masked on the left), a multiple of 2 x CP x TP for CP 2 x TP 2,
    so that every layout routes the same positions (MoE layers count every position in their router losses)."""
    return _left_padded(make_step_batch(qwen3_moe), 16)


@pytest.fixture(scope="module")
def ep_pp(qwen3_moe, moe_step, tmp_path_factory):
    """EP 2 x PP 2 on 4 processes (ranks 0-1: replica 0's stages, 2-3: replica 1's; EP groups {0, 2} and {1, 3}), the first
    stage holding 1 layer and the last 2 (num_layers_in_first_pipeline_stage=1); and EP 1 x PP 1 on one process."""
    step = moe_step
    one = run_ep(0, 1, _config(qwen3_moe), step)
    work = str(tmp_path_factory.mktemp("ep_pp"))
    four = run_distributed(run_ep, 4, _config(qwen3_moe, ep=2, pp=2, first_stage=1), step, work, timeout=400)
    return one, four


@pytest.mark.dist
def test_ep2_across_two_uneven_pipeline_stages_equals_one_process(ep_pp):
    one, four = ep_pp
    assert one["layers"] == 3 and one["experts"] == 3 * 4 * 2  # 3 layers x 4 experts x fc1, fc2
    assert [o["layers"] for o in four] == [1, 2, 1, 2] and [o["experts"] for o in four] == [1 * 2 * 2, 2 * 2 * 2] * 2  # E / EP = 2 local
    torch.testing.assert_close(torch.cat([four[0]["log_probs"], four[2]["log_probs"]]), one["log_probs"], atol=1e-5, rtol=0)
    for out in four:
        for key in ("loss", "grad_norm", "actor/pg_loss", "actor/moe/load_balancing_loss", "actor/moe/z_loss"):
            assert out["metrics"][key] == pytest.approx(one["metrics"][key], rel=1e-5, abs=1e-7), key
        assert set(out["weights"]) == set(one["weights"])
        for name, w in one["weights"].items():
            torch.testing.assert_close(out["weights"][name], w, atol=1e-5, rtol=1e-5, msg=lambda m, name=name: f"{name}: {m}")


@pytest.mark.dist
def test_distributed_optimizer_shards_adamw_and_updates_as_the_plain_one(ep_pp):
    """train.distributed_optimizer on the same 4 ranks: each dense tensor is owned by one of the 2 data-parallel replicas
    (the experts by their one expert-data-parallel rank), each rank's AdamW holds only its own, and the weights after two
    updates are the plain optimizer's bit for bit; a resume from its checkpoint repeats the second update exactly."""
    _, four = ep_pp
    for stage in (0, 1):  # the two replicas of a stage deal its dense tensors between them; experts stay with their rank
        a, b = four[stage], four[stage + 2]
        dense = [n for n, _, _ in a["trainable"] if ".local_experts." not in n]
        mine = {n for n, i, _ in a["trainable"] if i in set(a["owned"])}
        theirs = {n for n, i, _ in b["trainable"] if i in set(b["owned"])}
        assert mine.isdisjoint(theirs - {n for n in theirs if ".local_experts." in n}) and set(dense) <= mine | theirs
        assert 0 < len(mine & set(dense)) < len(dense) and a["zero_state_tensors"] == len(a["owned"]) < len(a["trainable"])
    for out in four:
        for key in ("loss", "grad_norm", "actor/pg_loss"):
            assert out["zero_metrics"][key] == out["metrics"][key] and out["zero_metrics_2"][key] == out["metrics_2"][key], key
            assert out["resumed_metrics_2"][key] == out["zero_metrics_2"][key], key
        for name, w in out["weights"].items():
            assert torch.equal(out["zero_weights"][name], w), name
            assert torch.equal(out["zero_weights_2"][name], out["weights_2"][name]), name
            assert torch.equal(out["resumed_weights_2"][name], out["zero_weights_2"][name]), name


def _assert_two_updates_equal(outs: list[dict], one: dict) -> None:
    """Every rank's log-probs, update metrics (router losses included) after 1 and 2 updates and weights after 2 == one process's."""
    for out in outs:
        torch.testing.assert_close(out["log_probs"], one["log_probs"], atol=1e-5, rtol=0)
        for key in ("loss", "grad_norm", "actor/pg_loss", "actor/moe/load_balancing_loss", "actor/moe/z_loss"):
            assert out["metrics"][key] == pytest.approx(one["metrics"][key], rel=1e-5, abs=1e-7), key
            assert out["metrics_2"][key] == pytest.approx(one["metrics_2"][key], rel=1e-5, abs=1e-7), key
        for name, w in one["weights_2"].items():
            torch.testing.assert_close(out["weights_2"][name], w, atol=1e-5, rtol=1e-5, msg=lambda m, name=name: f"{name}: {m}")


@pytest.mark.dist
def test_tp2_with_sequence_parallelism_equals_one_process(ep_pp, qwen3_moe, moe_step):
    """MoE layers with TP 2 (experts sliced over both ranks) under Megatron sequence parallelism on 2 processes: each
    rank's norms / router see half the tokens (8 of the 16 columns), the final hidden states are gathered for the head; log-probs, loss, grad norm, both router-loss metrics and the weights after two updates equal one process's."""
    one, _ = ep_pp
    two = run_distributed(run_ep, 2, _config(qwen3_moe, tp=2), moe_step, timeout=400)
    _assert_two_updates_equal(two, one)


@pytest.mark.dist
def test_expert_tp1_with_tp2_across_uneven_pipeline_stages_equals_one_process(ep_pp, qwen3_moe, moe_step, tmp_path):
    """TP 2 x expert TP 1 x EP 2 x PP 2 on 4 processes (verl's expert_tensor_parallel_size=1 with TP > 1): each stage's
    2 ranks split the attention over TP (sequence parallel) and the experts whole over EP (2 of the 4 per rank, the
    dispatcher gathering both TP ranks' tokens); stage 0 = ranks 0-1 (1 layer), stage 1 = ranks 2-3 (2 layers). Log-probs,
    loss, grad norm, pg loss, both router-loss metrics, the exported HF weights after the update equal one process's;
    a fresh engine resuming from the checkpoint taken after the first update repeats the second bit for bit."""
    one, _ = ep_pp
    four = run_distributed(run_ep, 4, _config(qwen3_moe, tp=2, etp=1, ep=2, pp=2, first_stage=1), moe_step, str(tmp_path), False,
                           timeout=400)
    assert [o["layers"] for o in four] == [1, 1, 2, 2] and [o["experts"] for o in four] == [1 * 2 * 2] * 2 + [2 * 2 * 2] * 2  # E / EP = 2 per rank
    assert [o["fc1"] for o in four] == [one["fc1"]] * 4  # each expert whole (TP 2 would halve its width)
    for out in four:
        torch.testing.assert_close(out["log_probs"], one["log_probs"], atol=1e-5, rtol=0)
        for key in ("loss", "grad_norm", "actor/pg_loss", "actor/moe/load_balancing_loss", "actor/moe/z_loss"):
            assert out["metrics"][key] == pytest.approx(one["metrics"][key], rel=1e-5, abs=1e-7), key
        assert set(out["weights"]) == set(one["weights"])
        for name, w in one["weights"].items():
            torch.testing.assert_close(out["weights"][name], w, atol=1e-5, rtol=1e-5, msg=lambda m, name=name: f"{name}: {m}")
        assert out["resumed_metrics_2"] == out["metrics_2"]
        for name, w in out["weights_2"].items():
            assert torch.equal(out["resumed_weights_2"][name], w), name


@pytest.mark.dist
def test_context_parallel_with_sequence_parallel_and_whole_experts_equals_one_process(ep_pp, qwen3_moe, moe_step):
    """CP 2 x TP 2 (sequence parallel) x expert TP 1 x EP 2 on 4 processes (verl's glm_air / qwen3_vl layouts, smaller): each
    CP rank holds 2 of the 4 chunks of the sequence (16 columns), its 2 TP ranks half of those each; the EP group is a CP
    rank's TP pair (the dispatcher gathers its tokens), the expert-data-parallel group the 2 CP ranks. Log-probs, loss, grad
    norm, pg loss, both router-loss metrics (summed / averaged over TP x CP) and the weights after two updates equal one
    process's on the same 16 columns."""
    one, _ = ep_pp
    four = run_distributed(run_ep, 4, _config(qwen3_moe, tp=2, etp=1, ep=2, cp=2), moe_step, timeout=400)
    assert [o["layout"] for o in four] == [(2, 2, 2, 1, True)] * 4
    assert [o["fc1"] for o in four] == [one["fc1"]] * 4 and [o["experts"] for o in four] == [3 * 2 * 2] * 4
    _assert_two_updates_equal(four, one)


def test_rank_groups_keep_the_replica_layout_and_split_each_stage_for_the_experts():
    """With pipeline stages megatron-core gets the pp-last order and its groups are renumbered (rl_train_megatron.parallel):
    the attention groups are those of the tp-cp-pp-dp order (a replica's stages on consecutive ranks); each stage's ranks,
    in order, are split expert TP first, then EP, then expert-DP, whatever the expert TP (ETP = TP gives megatron-core's
    own tp-cp-pp-ep-dp expert layout)."""
    from megatron.core import parallel_state as mpu

    from rl_train_megatron.parallel import _replicas_consecutive

    def groups(gen, tokens):
        return {t: sorted(gen.get_ranks(t)) for t in tokens}

    attention = ("tp", "cp", "pp", "dp", "dp-cp", "tp-pp", "tp-cp", "tp-dp", "tp-dp-cp")
    experts = ("tp", "ep", "dp", "pp", "tp-ep", "tp-ep-pp")
    for tp, cp, pp, dp in [(2, 1, 2, 1), (2, 1, 2, 2), (1, 2, 3, 2), (2, 2, 2, 2)]:
        with _replicas_consecutive(mpu, tp * cp, dp, pp):
            renumbered = mpu.RankGenerator(tp=tp, ep=1, dp=dp, pp=pp, cp=cp, order="tp-cp-ep-dp-pp")
        assert groups(renumbered, attention) == groups(mpu.RankGenerator(tp=tp, ep=1, dp=dp, pp=pp, cp=cp, order="tp-cp-pp-dp"), attention)
        if dp % 2 == 0:  # expert TP = TP x CP, EP 2
            with _replicas_consecutive(mpu, tp * cp, dp, pp):
                same = mpu.RankGenerator(tp=tp * cp, ep=2, dp=dp // 2, pp=pp, cp=1, order="tp-cp-ep-dp-pp")
            plain = mpu.RankGenerator(tp=tp * cp, ep=2, dp=dp // 2, pp=pp, cp=1, order="tp-cp-pp-ep-dp")
            assert {t: sorted(map(sorted, g)) for t, g in groups(same, experts).items()} == {t: sorted(map(sorted, g)) for t, g in groups(plain, experts).items()}
    with _replicas_consecutive(mpu, 2, 1, 2):  # TP 2 x expert TP 1 x EP 2 x PP 2 (the 4-process test): stages {0, 1} and {2, 3}
        gen = mpu.RankGenerator(tp=1, ep=2, dp=1, pp=2, cp=1, order="tp-cp-ep-dp-pp")
    assert groups(gen, experts) == {"tp": [[0], [1], [2], [3]], "ep": [[0, 1], [2, 3]], "dp": [[0], [1], [2], [3]], "pp": [[0, 2], [1, 3]],
                                    "tp-ep": [[0, 1], [2, 3]], "tp-ep-pp": [[0, 1, 2, 3]]}


def test_sequence_parallel_pads_the_columns_to_a_multiple_of_tp():
    from rl_train_megatron.sequence_parallel import pad_columns

    y = {"input_ids": torch.tensor([[5, 6, 7]]), "attention_mask": torch.tensor([[1, 1, 1]]), "position_ids": torch.tensor([[0, 1, 2]]),
         "responses": torch.tensor([[7]])}
    out = pad_columns(y, 2)
    assert out["input_ids"].tolist() == [[0, 5, 6, 7]] and out["attention_mask"].tolist() == [[0, 1, 1, 1]]
    assert out["position_ids"].tolist() == [[0, 0, 1, 2]] and out["responses"] is y["responses"] and pad_columns(y, 3) is y


def test_an_engine_of_another_depth_in_the_process_does_not_break_the_router_loss_tracker(tmp_path):
    """megatron-core keeps one router-loss tracker per process, sized by the first MoE model that trains: a 3-layer
    engine's update, then a 4-layer one's in the same process (as a critic of another depth would, or one test after
    another) used to fail with "index 3 is out of bounds for dimension 0 with size 3" in the deeper model's last layer.
    Each update's router-loss metrics are its own model's."""
    three = make_tiny_model_dir(tmp_path / "three", "qwen3_moe", hidden=32, layers=3, seed=0)
    four = make_tiny_model_dir(tmp_path / "four", "qwen3_moe", hidden=32, layers=4, seed=0)
    first = run_ep(0, 1, _config(three), _left_padded(make_step_batch(three), 16))
    second = run_ep(0, 1, _config(four), _left_padded(make_step_batch(four), 16))
    alone = run_distributed(run_ep, 1, _config(four), _left_padded(make_step_batch(four), 16))[0]  # a fresh process
    for out in (first, second):
        assert out["metrics"]["actor/moe/load_balancing_loss"] > 0
    assert second["metrics"]["actor/moe/load_balancing_loss"] == pytest.approx(alone["metrics"]["actor/moe/load_balancing_loss"], rel=1e-6)
    assert second["metrics"]["actor/moe/z_loss"] == pytest.approx(alone["metrics"]["actor/moe/z_loss"], rel=1e-6)
