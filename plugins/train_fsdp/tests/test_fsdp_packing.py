"""Packed sequences (actor.use_remove_padding) in the fsdp backend: the same loss and gradients as the padded layout."""

from __future__ import annotations

import attrs
import pytest
import torch
from rl_core.config.sections import evolve_key
from rl_core.backends import WorkerContext
from rl_core_testing.mixed_lengths import loss_and_grads, mixed_length_batch
from rl_core_testing.train_conformance import default_config
from rl_train_fsdp.engine import FSDPBackend

pytestmark = pytest.mark.usefixtures("one_thread")

# very different lengths: 2 to 40 prompt tokens, 3 to 150 response tokens, in one micro-batch
PROMPTS = [2, 40, 17, 9, 33]
RESPONSES = [150, 3, 61, 12, 97]


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def model_dir(request, tiny_model_dir):
    return tiny_model_dir(request.param)


def _backend(model_dir, role, packed: bool | None, **model):
    cfg = default_config(model_dir)
    cfg = attrs.evolve(cfg, actor=attrs.evolve(cfg.actor, use_remove_padding=packed), model=attrs.evolve(cfg.model, **model))
    return FSDPBackend(role, cfg, WorkerContext())


@pytest.mark.parametrize("role", ["actor", "critic"])
def test_packed_equals_padded(model_dir, role):
    batch = mixed_length_batch(PROMPTS, RESPONSES, seed=1)
    padded, packed = _backend(model_dir, role, False), _backend(model_dir, role, True)
    assert not padded.packed and packed.packed
    assert packed.model.config._attn_implementation == "rlcore_packed"
    loss_a, grads_a, heads_a = loss_and_grads(padded, batch)
    loss_b, grads_b, heads_b = loss_and_grads(packed, batch)
    mask = batch.tensors["response_mask"].bool()
    for field in ("log_probs", "entropy", "values"):
        a, b = getattr(heads_a, field), getattr(heads_b, field)
        if a is not None:
            torch.testing.assert_close(b[mask], a[mask], rtol=1e-4, atol=1e-5, msg=lambda m: f"{field}: {m}")
            assert not b[~mask].any(), f"{field}: packed padding positions hold 0"
    torch.testing.assert_close(loss_b, loss_a, rtol=1e-5, atol=1e-6)
    assert grads_a.keys() == grads_b.keys()
    for name in grads_a:
        torch.testing.assert_close(grads_b[name], grads_a[name], rtol=1e-4, atol=1e-6, msg=lambda m: f"{name}: {m}")
    assert any(g.abs().sum() > 0 for g in grads_b.values())


def test_packing_default(model_dir):
    """Unset: on, except for the actor / ref where the shared-prompt forward runs (the CPU default, measured faster for
    groups of responses to one prompt); the critic has no shared-prompt forward."""
    assert not _backend(model_dir, "ref", None).packed
    assert _backend(model_dir, "ref", None, share_prompt_forward=False).packed
    assert _backend(model_dir, "critic", None).packed


def test_packing_is_off_where_not_exact(model_dir):
    """A sliding window in use is not what the packed attention computes: the backend keeps the padded layout."""
    b = _backend(model_dir, "ref", True, override_config={"sliding_window": 8, "use_sliding_window": True, "max_window_layers": 0})
    assert not b.packed


def test_segment_attention_paths_agree():
    """The CPU's two ways (one masked call for short sequences, a call per sequence for long ones) compute the same."""
    from rl_train_fsdp import packing

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, h, 700, 8, generator=g) for h in (4, 2, 2))
    per_call = packing.segment_attention(q, k, v, (300, 400), None)  # mean 350 tokens: a call each
    old = packing.DENSE_MASK_MEAN_LEN
    try:
        packing.DENSE_MASK_MEAN_LEN = 10**6
        masked = packing.segment_attention(q, k, v, torch.tensor([300, 400]), None)  # one masked call
    finally:
        packing.DENSE_MASK_MEAN_LEN = old
    torch.testing.assert_close(masked, per_call, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(per_call[:, :, :300], packing.segment_attention(q[:, :, :300], k[:, :, :300], v[:, :, :300], (300,), None))


def test_default_packing_runs_dense_micro_batches_padded_on_a_gpu_without_varlen(monkeypatch):
    """The layout choice only (both layouts are exact: the tests above): on CUDA without flash-attn, packing chosen
    by default skips a micro-batch with little padding; forced packing, sequence parallelism and the CPU keep it."""
    import torch

    from rl_train_fsdp import packing

    class CudaMask:  # what run_padded reads of a CUDA tensor, on this CPU machine
        is_cuda = True

        def __init__(self, real, padded):
            self.t = torch.zeros(padded)
            self.t[:real] = 1

        def sum(self):
            return self.t.sum()

        def numel(self):
            return self.t.numel()

    monkeypatch.setattr(packing, "_flash_varlen", lambda: None)
    dense, sparse = CudaMask(97, 100), CudaMask(25, 100)
    assert packing.run_padded(dense, chosen_by_default=True, sequence_parallel=False)
    assert not packing.run_padded(sparse, chosen_by_default=True, sequence_parallel=False)
    assert not packing.run_padded(dense, chosen_by_default=False, sequence_parallel=False)  # use_remove_padding=true
    assert not packing.run_padded(dense, chosen_by_default=True, sequence_parallel=True)  # Ulysses needs packed rows
    assert not packing.run_padded(torch.ones(100), chosen_by_default=True, sequence_parallel=False)  # the CPU
    monkeypatch.setattr(packing, "_flash_varlen", lambda: object())  # flash-attn's varlen kernel installed
    assert not packing.run_padded(dense, chosen_by_default=True, sequence_parallel=False)


def test_pad_to_length_pads_each_packed_row_to_the_bucket(model_dir, monkeypatch):
    """actor.pad_to_length (verl's): each packed row is padded up to a multiple of fsdp_config.pad_to_length_bucket
    tokens (its own segment, never in the loss); log-probs, loss and gradients are those of the plain packed row."""
    from rl_train_fsdp import packing

    rows = []
    real_pack = packing.pack

    def recording_pack(*args, **kwargs):
        p = real_pack(*args, **kwargs)
        rows.append((p.input_ids.shape[1], p.seqlens))
        return p

    monkeypatch.setattr(packing, "pack", recording_pack)
    batch = mixed_length_batch(PROMPTS, RESPONSES, seed=1)
    plain = _backend(model_dir, "actor", True)
    cfg = default_config(model_dir)
    cfg = evolve_key(attrs.evolve(cfg, actor=attrs.evolve(cfg.actor, pad_to_length=True)), "actor.fsdp_config", attrs.evolve(cfg.actor.fsdp_config, pad_to_length_bucket=384))
    padded = FSDPBackend("actor", cfg, WorkerContext())
    assert padded.packed and not padded.packed_by_default
    loss_a, grads_a, heads_a = loss_and_grads(plain, batch)
    (n_plain, seq_plain), rows[:] = rows[-1], []
    loss_b, grads_b, heads_b = loss_and_grads(padded, batch)
    n_padded, seq_padded = rows[-1]
    real = sum(p + r for p, r in zip(PROMPTS, RESPONSES))
    assert n_plain == real and n_padded == 384 * -(-real // 384) and seq_padded[:-1] == seq_plain and seq_padded[-1] == n_padded - real
    mask = batch.tensors["response_mask"].bool()
    torch.testing.assert_close(heads_b.log_probs[mask], heads_a.log_probs[mask], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(loss_b, loss_a, rtol=1e-5, atol=1e-6)
    for name in grads_a:
        torch.testing.assert_close(grads_b[name], grads_a[name], rtol=1e-4, atol=1e-6, msg=lambda m: f"{name}: {m}")
