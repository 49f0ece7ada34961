"""model.dtype=float16's dynamic loss scaling (rl_core.train_engine.loss_scale) through core's update driver.

Checked by hand: the scale's sequence (halved and the step skipped on an overflow, doubled after the
interval of finite steps); an injected inf gradient leaves weights and AdamW state untouched; the gradients
AdamW sees are the unscaled ones (its first moment equals a float32 run's); a resume keeps the scale; and one
real update of a tiny Qwen2 model in float16 (autocast on the CPU) lands within float16 tolerance of float32.
"""

from __future__ import annotations

import math

import attrs
import pytest
import torch
from rl_core.config.schema import CriticConfig, ModelConfig, OptimConfig
from rl_core.train_engine.engine import RoleEngine
from rl_core.train_engine.loss_scale import LossScaler
from rl_core.train_engine.guard import NonFiniteError

from tests.core.test_train_engine import SavingToy, ToyCritic, _config, _critic_batch


def test_scale_sequence_by_hand():
    s = LossScaler(scale=8.0, interval=3, min_scale=1.0)
    taken = [s.update(g) for g in (1.0, math.inf, 2.0, 3.0, 4.0, math.nan, math.nan, math.nan, math.nan, 5.0)]
    assert taken == [True, False, True, True, True, False, False, False, False, True]
    # 8 -> inf: 4 (the good step before it forgotten) -> 3 good: 8 -> nan x4: 4, 2, 1, 1 (the floor) -> one good step
    assert (s.scale, s.good_steps, s.skipped) == (1.0, 1, 5)
    s2 = LossScaler(scale=8.0, interval=2)
    for _ in range(4):
        s2.update(1.0)
    assert s2.scale == 32.0 and s2.good_steps == 0
    restored = LossScaler()
    restored.load_state_dict(s.state_dict())
    assert (restored.scale, restored.good_steps, restored.skipped) == (1.0, 1, 5)


class Fp16Toy(SavingToy):
    """The toy critic with ``model.dtype=float16``; ``inject`` puts an inf into the next backward's gradient."""

    inject = False
    weights_seen: list[float]

    def backward(self, loss, weight):
        self.weights_seen = [*getattr(self, "weights_seen", []), weight]
        super().backward(loss, weight)
        if self.inject:
            self.model.weight.grad[3, 0] = math.inf


def _engine(dtype: str = "float16", toy=Fp16Toy, **optim) -> RoleEngine:
    cfg = _config(critic=CriticConfig(ppo_micro_batch_size_per_gpu=2, optim=OptimConfig(**{"lr": 0.1, "grad_clip": 0.5, **optim})))
    return RoleEngine(toy(attrs.evolve(cfg, model=ModelConfig(path="unused", dtype=dtype))))


def _adam_state(engine: RoleEngine) -> dict:
    return {k: v.clone() for k, v in engine.backend.optimizer.state[engine.model.weight].items()}


def test_float16_gets_a_scaler_others_do_not():
    assert _engine("float16").backend.loss_scaler.scale == 2.0**16
    assert _engine("bfloat16").backend.loss_scaler is None and _engine("float32").backend.loss_scaler is None
    assert "loss_scale" not in _engine("float32", toy=ToyCritic).update(_critic_batch())


def test_scaled_update_equals_the_unscaled_one():
    """Loss weights times 2**16, clipping at the scaled limit, gradients divided by the scale: AdamW's first moment
    (scale-dependent, unlike its step) and the weights equal a float32 run's; grad_norm is the unscaled norm."""
    batch = _critic_batch()
    fp16, fp32 = _engine("float16"), _engine("float32")
    for _ in range(2):
        a, b = fp16.update(batch), fp32.update(batch)
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-6) and a["loss"] == pytest.approx(b["loss"], rel=1e-6)
        assert a["loss_scale"] == 2.0**16 and a["loss_scale_skipped_steps"] == 0
    assert sorted(set(fp16.backend.weights_seen))[-1] > 1000  # the scale reached backward
    sa, sb = _adam_state(fp16), _adam_state(fp32)
    torch.testing.assert_close(sa["exp_avg"], sb["exp_avg"], rtol=1e-5, atol=1e-9)
    torch.testing.assert_close(fp16.model.weight, fp32.model.weight, rtol=1e-5, atol=1e-7)


def test_an_inf_gradient_skips_the_step_and_halves_the_scale():
    engine = _engine("float16")
    batch = _critic_batch()
    engine.update(batch)  # AdamW has state
    weight, adam = engine.model.weight.detach().clone(), _adam_state(engine)
    engine.backend.inject = True
    out = engine.update(batch)  # 2 mini-batches, both overflow
    assert out["loss_scale"] == 2.0**14 and out["loss_scale_skipped_steps"] == 2 and "grad_norm" not in out
    assert torch.equal(engine.model.weight, weight)
    after = _adam_state(engine)
    assert all(torch.equal(after[k], adam[k]) for k in adam)  # step counter and moments untouched
    assert engine.model.weight.grad is None  # the overflowed gradients dropped
    engine.backend.inject = False
    out = engine.update(batch)
    assert out["loss_scale"] == 2.0**14 and out["loss_scale_skipped_steps"] == 0 and math.isfinite(out["grad_norm"])
    assert not torch.equal(engine.model.weight, weight)


def test_gradients_still_non_finite_at_the_floor_stop_the_run():
    engine = _engine("float16")
    engine.backend.loss_scaler.scale = 1.0
    engine.backend.inject = True
    before = engine.model.weight.detach().clone()
    with pytest.raises(NonFiniteError, match="non-finite gradient norm"):
        engine.update(_critic_batch())
    assert torch.equal(engine.model.weight, before)


def test_resume_keeps_the_scale(tmp_path):
    a = _engine("float16")
    batch = _critic_batch()
    a.backend.inject = True
    a.update(batch)
    a.backend.inject = False
    a.update(batch)
    a.save_checkpoint(str(tmp_path / "ck"))
    b = _engine("float16")
    b.load_checkpoint(str(tmp_path / "ck"))
    assert b.backend.loss_scaler.state_dict() == a.backend.loss_scaler.state_dict() == {"scale": 2.0**14, "good_steps": 2, "skipped": 2}
    ma, mb = a.update(batch), b.update(batch)
    assert ma == mb and torch.equal(a.model.weight, b.model.weight)
    c = _engine("float16")  # save_contents without extra: nothing of the schedule or the scale is restored
    c.load_checkpoint(str(tmp_path / "ck"), ["model", "optimizer"], step=2)
    assert c.backend.loss_scaler.scale == 2.0**16
    d = _engine("float32")  # a float32 run reads a float16 run's checkpoint: the scale is dropped, the schedule kept
    d.load_checkpoint(str(tmp_path / "ck"))
    assert d.backend.loss_scaler is None and d.scheduler.last_epoch == 2


def test_float16_update_of_a_tiny_model_matches_float32(tmp_path):
    """One actor update of a tiny Qwen2 model (MinimalBackend: float32 weights and AdamW, autocast float16 on the CPU)
    against the same update in float32: loss, gradient norm and the updated weights within float16 tolerance."""
    from rl_core.backends import WorkerContext
    from rl_core_testing.minimal_backend import MinimalBackend
    from rl_core_testing.tiny_model import make_tiny_model_dir
    from rl_core_testing.train_conformance import default_config, make_step_batch

    model_dir = make_tiny_model_dir(tmp_path / "m")
    step = make_step_batch(model_dir)
    base = default_config(model_dir)
    runs = {}
    for dtype in ("float32", "float16"):
        cfg = attrs.evolve(base, model=attrs.evolve(base.model, dtype=dtype))
        engine = RoleEngine(MinimalBackend("actor", cfg, WorkerContext()))
        start = {k: v.clone() for k, v in engine.model.state_dict().items()}
        runs[dtype] = (engine.update(step), {k: v.detach().clone() for k, v in engine.model.state_dict().items()}, start, engine)
    (m32, w32, s32, _), (m16, w16, s16, e16) = runs["float32"], runs["float16"]
    assert e16.backend.autocast_dtype == torch.float16 and all(v.dtype == torch.float32 for v in w16.values())  # fp32 master weights
    assert m16["loss_scale"] == 2.0**16 and m16["loss_scale_skipped_steps"] == 0
    assert m16["loss"] == pytest.approx(m32["loss"], rel=2e-2, abs=2e-3)
    assert m16["grad_norm"] == pytest.approx(m32["grad_norm"], rel=2e-2)
    assert all(torch.equal(s16[k], s32[k]) for k in s32)
    d32 = torch.cat([(w32[k] - s32[k]).flatten() for k in w32])  # the update of every weight
    d16 = torch.cat([(w16[k] - s16[k]).flatten() for k in w16])
    assert d32.norm() > 0.1  # ~lr = 1e-3 per element: AdamW's steps
    # AdamW's steps are ~lr in size whatever the gradient's: a few elements whose gradient is ~0 may differ in sign
    assert float((d16 - d32).norm() / d32.norm()) < 0.03
    assert float(((d16 - d32).abs() > 2e-4).float().mean()) < 1e-3
