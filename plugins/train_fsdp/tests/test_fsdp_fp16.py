"""model.dtype=float16 on the fsdp backend: float32 master weights and AdamW, float16 compute (torch.autocast on one
process, FSDP2's MixedPrecisionPolicy when sharded), core's dynamic loss scaling (rl_core.train_engine.loss_scale).

The overflow here is a real one: a loss scale of 2**40 overflows float16's activation gradients (max 65504) in
backward, and the step is skipped with the weights untouched and the scale halved.
"""

from __future__ import annotations

import math

import attrs
import pytest
import torch
from rl_core.backends import WorkerContext
from rl_core_testing.distributed import run_distributed
from rl_core_testing.train_conformance import make_step_batch, rank_shard, single_rank_order
from rl_train_fsdp.engine import build_engine
from test_fsdp_engine import _cfg as _model_cfg, model_dir, step  # noqa: F401  (fixtures)

pytestmark = pytest.mark.usefixtures("one_thread")


def _cfg(model_dir, dtype="float16"):
    return _model_cfg(model_dir, dtype=dtype)


def _weights(engine) -> dict[str, torch.Tensor]:
    return {n: t.detach().clone() for n, t in engine.named_weights()}


def test_fp16_unsharded_update_matches_fp32_and_overflow_skips(model_dir, step):
    shard = single_rank_order(step, 2, 2)
    fp32, fp16 = build_engine("actor", _cfg(model_dir, "float32"), WorkerContext()), build_engine("actor", _cfg(model_dir), WorkerContext())
    assert fp16.backend.autocast_dtype == torch.float16 and fp16.backend.loss_scaler.scale == 2.0**16
    lp32, lp16 = fp32.compute_log_prob(shard)["log_probs"], fp16.compute_log_prob(shard)["log_probs"]
    mask = shard.tensors["response_mask"].bool()
    assert lp16.dtype == torch.float32 and 0 < (lp16 - lp32)[mask].abs().max() < 0.02  # float16 compute: close, not equal
    m32, m16 = fp32.update(shard), fp16.update(shard)
    assert m16["loss"] == pytest.approx(m32["loss"], rel=1e-2, abs=1e-3)
    assert m16["grad_norm"] == pytest.approx(m32["grad_norm"], rel=1e-2)
    assert m16["loss_scale"] == 2.0**16 and m16["loss_scale_skipped_steps"] == 0
    assert {p.dtype for p in fp16.model.parameters()} == {torch.float32}  # master weights
    # a real float16 overflow: the scaled gradients pass 65504 in backward
    fp16.backend.loss_scaler.scale = 2.0**40
    before = _weights(fp16)
    adam = {id(p): {k: v.clone() for k, v in s.items()} for p, s in fp16.backend.optimizer.state.items()}
    out = fp16.update(shard)  # 4 mini-batch steps (2 mini-batches x 2 epochs), each overflows: 2**40 -> 2**36
    assert out["loss_scale_skipped_steps"] == 4 and out["loss_scale"] == 2.0**36 and "grad_norm" not in out
    assert all(torch.equal(before[n], t) for n, t in fp16.named_weights())
    assert all(torch.equal(adam[id(p)][k], v) for p, s in fp16.backend.optimizer.state.items() for k, v in s.items())
    fp16.backend.loss_scaler.scale = 2.0**16
    assert fp16.update(shard)["loss_scale_skipped_steps"] == 0 and not all(torch.equal(before[n], t) for n, t in fp16.named_weights())
    ref = build_engine("ref", _cfg(model_dir), WorkerContext())
    assert {p.dtype for p in ref.model.parameters()} == {torch.float16} and ref.backend.loss_scaler is None


def _fp16_sharded(rank, world, model_dir, ckpt_dir):
    step = make_step_batch(model_dir)
    cfg = _cfg(model_dir)
    actor = build_engine("actor", cfg, WorkerContext(rank=rank, world_size=world))
    policy = actor.model._get_fsdp_state()._mp_policy
    shard = rank_shard(step, rank, world)
    first = actor.update(shard)
    actor.backend.loss_scaler.scale = 2.0**40  # overflows in float16
    second = actor.update(shard)
    actor.save_checkpoint(ckpt_dir)
    again = build_engine("actor", cfg, WorkerContext(rank=rank, world_size=world))
    again.load_checkpoint(ckpt_dir)
    return {"policy": (policy.param_dtype, policy.reduce_dtype), "dtypes": {p.dtype for p in actor.model.parameters()},
            "first": first, "second": second, "scaler": actor.backend.loss_scaler.state_dict(),
            "reloaded": again.backend.loss_scaler.state_dict(), "next": (actor.update(shard), again.update(shard))}


@pytest.mark.dist
def test_fp16_sharded_mixed_precision_and_resume(model_dir, step, tmp_path):
    """FSDP2 MixedPrecisionPolicy(param_dtype=float16, reduce_dtype=float32) on 2 ranks: the update matches float32 on one
    process; an overflow is skipped on both ranks alike; a DCP checkpoint restores the scale and the next update is identical."""
    outs = run_distributed(_fp16_sharded, 2, model_dir, str(tmp_path / "ck"))
    m32 = build_engine("actor", _cfg(model_dir, "float32"), WorkerContext()).update(single_rank_order(step, 2, 2))
    for o in outs:
        assert o["policy"] == (torch.float16, torch.float32) and o["dtypes"] == {torch.float32}
        assert o["first"]["loss"] == pytest.approx(m32["loss"], rel=1e-2, abs=1e-3)
        assert o["first"]["grad_norm"] == pytest.approx(m32["grad_norm"], rel=2e-2)
        assert o["second"]["loss_scale_skipped_steps"] == 4 and o["second"]["loss_scale"] == 2.0**36 and math.isfinite(o["second"]["loss"])
        assert o["reloaded"] == o["scaler"] and o["scaler"]["skipped"] == o["second"]["loss_scale_skipped_steps"]
        a, b = o["next"]
        assert a == b
    assert outs[0]["scaler"] == outs[1]["scaler"]


@pytest.mark.slow
@pytest.mark.dist
@pytest.mark.parametrize("rollout", ["hf", "vllm"])
def test_two_step_grpo_fp16_sharded(tmp_path, rollout):
    """``rlcore train``: FSDP2 over 2 CPU processes in float16 with the float16 hf rollout (or vLLM's CPU engine
    with dtype="float16" in the vLLM venv), weights synced each step."""
    from rl_core_testing.fp16_run import engine_missing, fp16_grpo_run

    if (why := engine_missing(rollout)) is not None:
        pytest.skip(why)
    fp16_grpo_run(tmp_path, nprocs=2, rollout=rollout, model=dict(arch="llama", hidden=128, layers=2, heads=2, kv_heads=2))  # head size 64: vLLM's CPU kernels


def test_fp16_with_lora_adapters(model_dir, step):
    """LoRA (docs/lora.md) in float16: the frozen base in float16, the adapters (the only trained weights) float32 under
    AdamW, the loss scale over their gradients; the update within float16 tolerance of LoRA in float32."""
    pytest.importorskip("peft", reason="LoRA needs peft (pip install rl-lora)")
    shard = single_rank_order(step, 2, 2)

    def lora(dtype):
        cfg = _cfg(model_dir, dtype)
        return build_engine("actor", attrs.evolve(cfg, model=attrs.evolve(cfg.model, lora_rank=4, lora_alpha=8.0)), WorkerContext())

    l32, l16 = lora("float32"), lora("float16")
    trained = {p.dtype for p in l16.model.parameters() if p.requires_grad}
    frozen = {p.dtype for p in l16.model.parameters() if not p.requires_grad}
    assert trained == {torch.float32} and frozen == {torch.float16}
    m32, m16 = l32.update(shard), l16.update(shard)
    assert m16["loss_scale"] == 2.0**16 and m16["loss_scale_skipped_steps"] == 0
    assert m16["loss"] == pytest.approx(m32["loss"], rel=1e-2, abs=1e-3)
    assert m16["grad_norm"] == pytest.approx(m32["grad_norm"], rel=2e-2)
    a32 = {n: p.detach() for n, p in l32.model.named_parameters() if p.requires_grad}
    a16 = {n: p.detach() for n, p in l16.model.named_parameters() if p.requires_grad}
    s32, s16 = ({n: p.detach() for n, p in lora(dt).model.named_parameters() if p.requires_grad} for dt in ("float32", "float16"))  # seeded starts
    d32 = torch.cat([(a32[n] - s32[n]).flatten() for n in a32])
    d16 = torch.cat([(a16[n] - s16[n]).flatten() for n in a32])
    assert d32.norm() > 0.01  # the adapters moved: AdamW steps of ~lr = 1e-3
    # AdamW's steps are ~lr whatever the gradient's size: a few elements whose gradient is ~0 may differ in sign
    assert float((d16 - d32).norm() / d32.norm()) < 0.05
