"""fsdp engine behaviour beyond the shared conformance suite."""

from __future__ import annotations

import math

import attrs
import pytest
import torch
from rl_core.config.sections import evolve_key
from rl_core.backends import WorkerContext
from rl_core_testing.adam_weights import assert_adam_weights_close, zero_grad_in_exact_arithmetic
from rl_core_testing.distributed import run_distributed
from rl_core_testing.train_conformance import default_config, make_step_batch, rank_shard, single_rank_order
from rl_train_fsdp.engine import FSDPBackend, build_engine

from tests.numerics import AdamWSteps, assert_adamw_steps, assert_fails, assert_reduction_close, lm_gradient_terms, perturbed

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def model_dir(tiny_model_dir):
    return tiny_model_dir("qwen2")


@pytest.fixture(scope="module")
def step(model_dir):
    return make_step_batch(model_dir)


def _cfg(model_dir, **model):
    cfg = default_config(model_dir)
    return attrs.evolve(cfg, model=attrs.evolve(cfg.model, **model)) if model else cfg


# ------------------------------------------------------------------ the card
def test_card_is_registered_and_truthful():
    from rl_core.plugins import get_registry

    card = get_registry(reload=True).get("train", "fsdp")
    assert card.provider.distribution == "rl-train-fsdp"
    assert card.devices == {"cpu", "cuda"}
    assert card.parallelism == {"dp", "fsdp", "ulysses", "ep"}  # ep: rl_train_fsdp.experts (test_fsdp_expert_parallel.py)
    assert card.roles == {"actor", "critic", "ref"}
    assert card.export_formats == {"hf"}
    assert card.load() is FSDPBackend


# ----------------------------------------------------------- plain module
def test_unsharded_named_weights_are_views_and_tied_once(model_dir):
    engine = build_engine("actor", _cfg(model_dir), WorkerContext())
    params = dict(engine.model.named_parameters())
    names = []
    for name, t in engine.named_weights():
        names.append(name)
        assert t.data_ptr() == params[name].data_ptr(), f"{name} was copied"
        assert not t.requires_grad
    assert "lm_head.weight" not in names and "model.embed_tokens.weight" in names  # qwen2 ties them
    assert len(names) == len(params)


def test_gradient_checkpointing_gives_the_same_update(model_dir, step):
    shard = single_rank_order(step, 2, 2)
    plain = build_engine("actor", _cfg(model_dir), WorkerContext()).update(shard)
    ckpt = build_engine("actor", _cfg(model_dir, enable_gradient_checkpointing=True), WorkerContext()).update(shard)
    for key in ("loss", "grad_norm", "actor/pg_loss", "actor/kl_loss", "actor/entropy"):
        assert ckpt[key] == pytest.approx(plain[key], rel=1e-6, abs=1e-7), key


def test_compiled_decoder_layers_give_the_same_update(model_dir, step):
    """model.compile: every decoder layer torch.compiled (inductor on CPU here); eager's gradients, loss and weights.
    Proves, with bounds from the dtype and the reduction size (tests/numerics.py; issue 55): the first AdamW step's
    gradients equal eager's within the rounding two correct float32 evaluations can differ by; each side's weights
    after all its steps are torch AdamW's steps of its own gradients (a float64 reference); and, as before, the
    metrics and the weights agree as far as two AdamW runs can (rl_core.testing.adam_weights: an entry whose gradient
    is rounding noise moves by ~lr either way, and the later steps start from there). A 1e-3 error in the first
    gradients or in the update fails."""
    from rl_core.modeling import decoder_layers

    shard = single_rank_order(step, 2, 2)
    plain_engine = build_engine("actor", _cfg(model_dir), WorkerContext())
    compiled_engine = build_engine("actor", _cfg(model_dir, compile=True), WorkerContext())
    assert all(layer._compiled_call_impl is not None for layer in decoder_layers(compiled_engine.model))
    before = {name: t.detach().clone() for name, t in plain_engine.named_weights()}
    with AdamWSteps(plain_engine.optimizer, plain_engine.model) as plain_steps:
        plain = plain_engine.update(shard)
    with AdamWSteps(compiled_engine.optimizer, compiled_engine.model) as compiled_steps:
        compiled = compiled_engine.update(shard)
    assert plain_steps.hyper() == compiled_steps.hyper() and plain_steps.lrs == compiled_steps.lrs
    assert len(plain_steps.grads) == len(compiled_steps.grads) > 1
    for key in ("loss", "grad_norm", "actor/pg_loss", "actor/entropy"):
        assert compiled[key] == pytest.approx(plain[key], rel=1e-5, abs=1e-6), key
    for (name, a), (_, b) in zip(plain_engine.named_weights(), compiled_engine.named_weights()):
        if zero_grad_in_exact_arithmetic(name):
            continue
        assert_adam_weights_close(b, a, before[name], name=name, atol=1e-6, rtol=1e-5)
    terms = lm_gradient_terms(plain_engine.model.config, shard.tensors)
    want = plain_steps.grads[0]
    assert want.keys() == compiled_steps.grads[0].keys() == before.keys()

    def same_gradients(got):
        for name, g in got.items():
            if not zero_grad_in_exact_arithmetic(name):  # 0 in exact arithmetic: rounding noise on both sides
                assert_reduction_close(g, want[name], terms=terms, name=f"{name} gradient (first step)")

    def adamw_steps(afters, steps=compiled_steps):
        for name, w in afters.items():
            assert_adamw_steps(w, before[name], steps, name=name)

    same_gradients(compiled_steps.grads[0])
    adamw_steps(dict(plain_engine.named_weights()), plain_steps)
    after = dict(compiled_engine.named_weights())
    adamw_steps(after)
    # the negative cases: a gradient or an update wrong by 1e-3 fails
    assert_fails(same_gradients, {n: perturbed(g) for n, g in compiled_steps.grads[0].items()})
    assert_fails(adamw_steps, {n: perturbed(w, around=before[n]) for n, w in after.items()})


def _grouped(batch):
    """Rows 2k+1 get row 2k's prompt, so the batch has groups of two responses per prompt (as GRPO's do)."""
    from rl_core.modeling import position_ids_from_mask
    from rl_core.train_engine.shared_prompt import prompt_groups

    t = batch.tensors
    R = t["responses"].shape[1]
    P = t["input_ids"].shape[1] - R
    for key in ("input_ids", "attention_mask"):
        v = t[key].clone()
        v[1::2, :P] = v[0::2, :P]
        t[key] = v
    t["position_ids"] = position_ids_from_mask(t["attention_mask"])
    assert int(prompt_groups(t["input_ids"], t["attention_mask"], P)[-1]) + 1 == len(batch) // 2
    return batch


def test_shared_prompt_forward_is_on_for_cpu_by_default_and_gives_the_same_update(model_dir, step):
    shard = _grouped(single_rank_order(step, 2, 2))
    auto = build_engine("actor", _cfg(model_dir), WorkerContext())
    off = build_engine("actor", _cfg(model_dir, share_prompt_forward=False), WorkerContext())
    assert auto.backend.share_prompts and not off.backend.share_prompts  # default (null): on for CPU training
    a, b = auto.update(shard), off.update(shard)
    for key in ("loss", "grad_norm", "actor/pg_loss", "actor/entropy"):
        assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-6), key


def test_bf16_autocast_unsharded_keeps_fp32_master_weights(model_dir, step):
    shard = single_rank_order(step, 2, 2)
    fp32 = build_engine("actor", _cfg(model_dir), WorkerContext())
    bf16 = build_engine("actor", _cfg(model_dir, dtype="bfloat16"), WorkerContext())
    lp32 = fp32.compute_log_prob(shard)["log_probs"]
    lp16 = bf16.compute_log_prob(shard)["log_probs"]
    assert lp16.dtype == torch.float32
    mask = shard.tensors["response_mask"].bool()
    assert 0 < (lp16 - lp32)[mask].abs().max() < 0.1  # bf16 compute: close, not equal
    m32, m16 = fp32.update(shard), bf16.update(shard)
    assert m16["loss"] == pytest.approx(m32["loss"], rel=2e-2, abs=2e-3)
    assert {p.dtype for p in bf16.model.parameters()} == {torch.float32}
    ref = build_engine("ref", _cfg(model_dir, dtype="bfloat16"), WorkerContext())
    assert {p.dtype for p in ref.model.parameters()} == {torch.bfloat16}  # the ref never trains: no fp32 copy


def test_checkpoint_roundtrip_in_process(model_dir, step, tmp_path):
    shard = single_rank_order(step, 2, 2)
    a = build_engine("actor", _cfg(model_dir), WorkerContext())
    a.update(shard)
    a.save_checkpoint(str(tmp_path / "ck"))
    saved = a.local_state_dict()
    after_save = a.update(shard)
    b = build_engine("actor", _cfg(model_dir), WorkerContext())
    b.load_checkpoint(str(tmp_path / "ck"))
    loaded = b.local_state_dict()
    for name, t in saved["model"].items():
        assert torch.equal(loaded["model"][name], t), name
    for pid, st in saved["optim"]["state"].items():
        for key, t in st.items():
            assert torch.equal(loaded["optim"]["state"][pid][key], t), (pid, key)
    assert loaded["scheduler"]["last_epoch"] == saved["scheduler"]["last_epoch"] == 1
    assert b.update(shard) == after_save


def test_load_checkpoint_missing_path(model_dir, tmp_path):
    a = build_engine("actor", _cfg(model_dir), WorkerContext())
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        a.load_checkpoint(str(tmp_path / "nothing"))


# ---------------------------------------------------------------- errors
def test_roles_reject_the_wrong_calls(model_dir, step):
    ref = build_engine("ref", _cfg(model_dir), WorkerContext())
    with pytest.raises(RuntimeError, match="ref role does not train"):
        ref.update(step)
    critic = build_engine("critic", _cfg(model_dir), WorkerContext())
    with pytest.raises(RuntimeError, match="compute_values"):
        critic.compute_log_prob(step)
    actor = build_engine("actor", _cfg(model_dir), WorkerContext())
    with pytest.raises(RuntimeError, match="critic role"):
        actor.compute_values(step)


def test_update_needs_the_loss_fields(model_dir, step):
    actor = build_engine("actor", _cfg(model_dir), WorkerContext())
    with pytest.raises(KeyError, match="advantages"):
        actor.update(step.select("input_ids", "attention_mask", "position_ids", "responses", "response_mask", "old_log_probs", "ref_log_prob"))


def test_mini_batch_count_not_dividing_the_shard(model_dir, step):
    actor = build_engine("actor", _cfg(model_dir), WorkerContext())
    with pytest.raises(ValueError, match=r"7 sequences cannot be split into 2 mini-batches .* 7 % 2 = 1"):
        actor.update(step.index(list(range(7))))


def test_world_size_without_process_group_is_an_error(model_dir):
    with pytest.raises(RuntimeError, match="not initialised"):
        build_engine("actor", _cfg(model_dir), WorkerContext(rank=0, world_size=2))


def test_random_init_still_needs_a_config(tmp_path, model_dir):
    cfg = _cfg(model_dir, random_init=True, path=str(tmp_path / "nope"))
    with pytest.raises(FileNotFoundError, match="rlcore model smollm2"):
        build_engine("actor", cfg, WorkerContext())
    engine = build_engine("actor", _cfg(model_dir, random_init=True), WorkerContext())
    assert sum(1 for _ in engine.named_weights()) > 0


# -------------------------------------------------------------- schedule
def test_set_total_steps_validates(model_dir):
    actor = build_engine("actor", _cfg(model_dir), WorkerContext())
    with pytest.raises(ValueError, match="positive"):
        actor.set_total_steps(0)
    actor.set_total_steps(10)
    assert actor._schedule.total_steps == 10


# ------------------------------------------------------- bf16 + sharded
def _with_fsdp(cfg, **kw):
    return evolve_key(cfg, "actor.fsdp_config", attrs.evolve(cfg.actor.fsdp_config, **kw))


def _bf16_sharded(rank, world, model_dir, ckpt_dir):
    step = make_step_batch(model_dir)
    cfg = _cfg(model_dir, dtype="bfloat16", enable_gradient_checkpointing=True)
    actor = build_engine("actor", cfg, WorkerContext(rank=rank, world_size=world))
    shard = rank_shard(step, rank, world)
    lp = actor.compute_log_prob(shard)["log_probs"]
    metrics = actor.update(shard)
    dtypes = {p.dtype for p in actor.model.parameters()}
    weights = {n: t.clone() for n, t in actor.named_weights()}
    # actor.fsdp_config.reduce_dtype=bfloat16 (verl's mixed_precision.reduce_dtype): the policy FSDP2 runs with
    bf16_reduce = build_engine("actor", _with_fsdp(cfg, reduce_dtype="bfloat16"), WorkerContext(rank=rank, world_size=world))
    reduce_dtypes = [e.model._get_fsdp_state()._mp_policy.reduce_dtype for e in (actor, bf16_reduce)]
    # actor.fsdp_config.fsdp_size=1 on 2 ranks (verl's fsdp_size): hybrid sharding, 2 copies x 1 shard
    hsdp = build_engine("actor", _with_fsdp(cfg, fsdp_size=1), WorkerContext(rank=rank, world_size=world))
    mesh = tuple(next(hsdp.model.parameters()).device_mesh.shape)
    hsdp_metrics = hsdp.update(shard)
    hsdp.save_checkpoint(ckpt_dir)
    again = build_engine("actor", _with_fsdp(cfg, fsdp_size=1), WorkerContext(rank=rank, world_size=world))
    again.load_checkpoint(ckpt_dir)
    saved, loaded = hsdp.local_state_dict()["model"], again.local_state_dict()["model"]
    return {"lp": lp, "metrics": metrics, "dtypes": dtypes, "weights": weights, "reduce_dtypes": reduce_dtypes,
            "bf16_reduce_metrics": bf16_reduce.update(shard), "hsdp_mesh": mesh, "hsdp_metrics": hsdp_metrics,
            "hsdp_weights": {n: t.clone() for n, t in hsdp.named_weights()},
            "hsdp_reloaded": all(torch.equal(loaded[k], t) for k, t in saved.items()) and saved.keys() == loaded.keys()}


@pytest.mark.dist
def test_bf16_mixed_precision_sharded(model_dir, step, tmp_path):
    """FSDP2 MixedPrecisionPolicy (bf16 compute, fp32 params and grad reduction) with gradient checkpointing;
    bf16 gradient reduction and hybrid sharding (HSDP) of the same step."""
    outs = run_distributed(_bf16_sharded, 2, model_dir, str(tmp_path / "hsdp_ck"))
    fp32 = build_engine("actor", _cfg(model_dir), WorkerContext())
    mask = step.tensors["response_mask"].bool()
    lp32 = fp32.compute_log_prob(step)["log_probs"]
    lp16 = torch.cat([o["lp"] for o in outs])
    assert 0 < (lp16 - lp32)[mask].abs().max() < 0.1
    m32 = fp32.update(single_rank_order(step, 2, 2))
    for o in outs:
        assert o["dtypes"] == {torch.float32}
        assert o["reduce_dtypes"] == [torch.float32, torch.bfloat16]
        assert o["bf16_reduce_metrics"]["loss"] == pytest.approx(o["metrics"]["loss"], rel=1e-3)  # the same step, gradients summed in bf16
        assert math.isfinite(o["bf16_reduce_metrics"]["grad_norm"])
        assert o["bf16_reduce_metrics"]["grad_norm"] == pytest.approx(o["metrics"]["grad_norm"], rel=5e-2)
        assert math.isfinite(o["metrics"]["grad_norm"])
        # HSDP: the same averaged gradients as FSDP over both ranks (all-reduced across the copies), and a DCP round trip
        assert o["hsdp_mesh"] == (2, 1) and o["hsdp_reloaded"]
        assert o["hsdp_metrics"]["loss"] == pytest.approx(o["metrics"]["loss"], rel=1e-5)
        assert o["hsdp_metrics"]["grad_norm"] == pytest.approx(o["metrics"]["grad_norm"], rel=1e-4)
        assert o["metrics"]["loss"] == pytest.approx(m32["loss"], rel=2e-2, abs=2e-3)
        assert o["metrics"]["grad_norm"] == pytest.approx(m32["grad_norm"], rel=5e-2)
    for name, w in outs[0]["hsdp_weights"].items():  # the two model copies stay identical
        assert torch.equal(outs[1]["hsdp_weights"][name], w), name
    for name, w in outs[0]["weights"].items():
        assert torch.equal(outs[1]["weights"][name], w)
        assert w.dtype == torch.float32
