"""Verified weight sync (rl_core.weight_sync_check): an hf engine that keeps stale weights stops the run."""

from __future__ import annotations

import pytest
import torch
from rl_core.backends import WorkerContext
from rl_core.config.schema import DataConfig, ModelConfig, RolloutConfig, RunConfig
from rl_core.rollout.hf import factory
from rl_core.weight_sync_check import StaleWeightsError, WeightTap, sample_positions, verify_sync
from rl_core_testing.tiny_model import make_tiny_model_dir


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    model_dir = make_tiny_model_dir(tmp_path_factory.mktemp("sync"), "llama", hidden=32, layers=1)
    cfg = RunConfig(model=ModelConfig(path=str(model_dir)), data=DataConfig(max_prompt_length=32), rollout=RolloutConfig())
    return factory(cfg, WorkerContext())


def _new_weights(engine, shift):
    return {n: p.detach().clone() + shift for n, p in engine.model.named_parameters()}


def test_a_real_load_passes_and_stale_weights_fire(engine, monkeypatch):
    tap = WeightTap(_new_weights(engine, 0.5).items())
    engine.load_weights(tap)
    assert verify_sync(tap, engine, engine_name="hf", version=1) == len(list(engine.model.named_parameters()))

    # an engine handed new weights that keeps the old ones: its copy is lost
    monkeypatch.setattr(torch.Tensor, "copy_", lambda self, src, non_blocking=False: self)
    tap = WeightTap(_new_weights(engine, 0.25).items())
    engine.load_weights(tap)
    monkeypatch.undo()
    with pytest.raises(StaleWeightsError, match=r"weight version 2: the rollout engine 'hf' kept stale weights: (\d+) of \1 tensors differ"):
        verify_sync(tap, engine, engine_name="hf", version=2)


def test_one_stale_tensor_or_one_rounding_step_in_the_engines_dtype_is_seen(engine):
    sent = _new_weights(engine, 0.0)
    tap = WeightTap(sent.items())
    engine.load_weights(tap)
    name = "model.layers.0.mlp.down_proj.weight"
    pos = sample_positions(name, sent[name].numel())
    with torch.no_grad():  # the engine's copy of one tensor drifts at one sampled element, by one float32 ulp
        flat = engine.model.get_parameter(name).view(-1)
        flat[pos[0]] = torch.nextafter(flat[pos[0]], torch.tensor(float("inf")))
    with pytest.raises(StaleWeightsError, match=r"1 of \d+ tensors differ.*mlp\.down_proj\.weight \(fingerprint sent"):
        verify_sync(tap, engine, engine_name="hf", version=3)


def test_a_bfloat16_engine_checks_the_trainers_float32_weights_in_its_own_dtype(engine):
    sent = {n: p + 1e-3 for n, p in _new_weights(engine, 0.0).items()}
    engine.model.to(torch.bfloat16)
    try:
        tap = WeightTap(sent.items())
        engine.load_weights(tap)  # cast on copy: equal after the trainer's values are cast the same way
        assert verify_sync(tap, engine, engine_name="hf", version=4)
    finally:
        engine.model.to(torch.float32)


def test_engines_that_cannot_be_asked_are_not_verified():
    tap = WeightTap([("w", torch.ones(3))])
    list(tap)
    assert verify_sync(tap, object(), engine_name="vllm", version=0) is None


class _Holder:
    """An engine holding ``state`` as it is (its ``sample_weights`` reads it)."""

    def __init__(self, state):
        self.state = state

    def sample_weights(self, positions):
        from rl_core.weight_sync_check import sample_state

        return sample_state(self.state.items(), positions)


def test_every_expert_of_a_fused_3d_experts_tensor_is_sampled():
    """transformers 5 stacks a layer's experts in one 3-D tensor: each expert's matrix gets its own SAMPLES positions,
    so one stale expert among 64 is seen (16 positions over the whole tensor would miss most experts)."""
    from rl_core.weight_sync_check import SAMPLES

    name, experts, rows, cols = "model.layers.0.mlp.experts.down_proj", 64, 8, 4
    pos = sample_positions(name, experts * rows * cols, SAMPLES, experts)
    per_expert = torch.bincount(pos // (rows * cols), minlength=experts)
    assert per_expert.tolist() == [SAMPLES] * experts
    unstratified = sample_positions(name, experts * rows * cols)
    missed = sorted(set(range(experts)) - set((unstratified // (rows * cols)).tolist()))
    assert len(unstratified) == SAMPLES and missed  # the old sampling leaves experts out: pick one of those

    sent = {name: torch.randn(experts, rows, cols), "model.norm.weight": torch.randn(cols)}
    held = {k: v.clone() for k, v in sent.items()}
    held[name][missed[0]] += 1.0  # the engine kept one expert stale
    tap = WeightTap(sent.items())
    list(tap)
    assert len(tap.positions["model.norm.weight"]) == cols  # not 3-D: as before
    with pytest.raises(StaleWeightsError, match=r"1 of 2 tensors differ from what the trainer sent: model\.layers\.0\.mlp\.experts\.down_proj \(fingerprint"):
        verify_sync(tap, _Holder(held), engine_name="vllm", version=1)
    assert verify_sync(tap, _Holder(sent), engine_name="vllm", version=1) == 2
