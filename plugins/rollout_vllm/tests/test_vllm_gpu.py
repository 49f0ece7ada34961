"""The vLLM engine on a GPU in bf16: the rollout conformance suite, sleep mode and colocated weight sync.

Runs where CUDA and a GPU build of vLLM are installed (tested: vLLM 0.26.0, torch 2.11 + CUDA 13, one H100;
bench/results/vllm_gpu_h100.md has the run); skips elsewhere with the reason.

Tolerance. The reference is a float32 ``transformers`` forward pass of the float32 checkpoint. vLLM loads
the weights as bfloat16 (8-bit mantissa: every weight and activation rounded to a relative 2**-9, ~0.2%)
and computes in bf16 with fp32 accumulation. On the tiny model (2 layers, hidden 128, logits of order 1)
that moves the log-probs of sampled tokens by up to a few hundredths of a nat; ``logprob_atol = 0.05``
is ~2x the largest difference measured on the H100. Greedy tokens may flip where two logits are within
bf16 rounding, so the exact-greedy test is off (``greedy_exact``); determinism tests still apply.
"""

from __future__ import annotations

import attrs
import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU (vLLM's GPU build); on CPU see test_vllm_conformance.py", allow_module_level=True)
try:
    import vllm  # noqa: F401
except Exception as exc:  # noqa: BLE001
    pytest.skip(f"needs the vLLM engine (pip install 'rl-rollout-vllm[gpu]'): {type(exc).__name__}: {exc}", allow_module_level=True)

import test_vllm_conformance as cpu_suite  # noqa: E402  (a module, so its CPU classes are not collected here)
from rl_core.backends import SamplingParams, WorkerContext  # noqa: E402
from rl_core_testing.rollout_conformance import reference_log_probs, reference_model  # noqa: E402
from rl_rollout_vllm.engine import build  # noqa: E402

pytestmark = [pytest.mark.vllm, pytest.mark.gpu]


class TestVLLMRolloutGPU(cpu_suite.TestVLLMRolloutLlama):
    """bf16 vLLM on CUDA (see the module docstring for the tolerance)."""

    logprob_atol = 0.05
    greedy_exact = False
    torch_threads = None

    #: vLLM's sleep-mode allocator (CuMem) serves one engine per process at a time; the suite keeps a class-wide
    #: engine alive while it builds fresh ones, so sleep mode is tested on its own in TestVLLMSleepGPU.
    enable_sleep = False

    def make_config(self, model_dir, **rollout):
        kwargs = dict(rollout.pop("engine_kwargs", None) or {})
        kwargs.setdefault("enforce_eager", True)  # many short-lived engines: skip CUDA-graph capture
        rollout.setdefault("enable_sleep", self.enable_sleep)
        cfg = super().make_config(model_dir, engine_kwargs=kwargs, gpu_memory_utilization=0.15, **rollout)
        return attrs.evolve(cfg, model=attrs.evolve(cfg.model, dtype="bfloat16"))

    def make_engine(self, model_dir, config):
        return build(config, WorkerContext(device="cuda"))

    # CPU-only facts of the parent class that do not hold (or mean nothing) on a GPU
    test_engine_start_keeps_threads_and_rng = None


class TestVLLMSleepGPU(TestVLLMRolloutGPU):
    """Sleep mode on: one engine for the whole class (the CuMem allocator's limit), tests in this order."""

    enable_sleep = True

    @pytest.fixture(scope="class")
    def fresh_engine(self, engine):
        return engine


    def test_sleep_frees_memory_and_wake_up_restores_generation(self, fresh_engine, prompts):
        params = SamplingParams(n=2, max_new_tokens=8, temperature=1.0, logprobs=True, seed=11)
        before = fresh_engine.generate(prompts, params)
        free0 = torch.cuda.mem_get_info()[0]
        fresh_engine.sleep()
        freed = torch.cuda.mem_get_info()[0] - free0
        assert freed > 2**28, f"sleep() freed only {freed / 2**20:.0f} MiB (the KV cache alone is larger)"
        fresh_engine.wake_up()
        after = fresh_engine.generate(prompts, params)
        assert torch.equal(after.tensors["responses"], before.tensors["responses"])
        assert after.meta["rollout/sleep_freed_gib"] * 2**30 == pytest.approx(freed, rel=0.05)
        assert after.meta["rollout/wake_s"] >= 0

    def test_sync_while_asleep_then_generate_follows_new_weights(self, fresh_engine, model_dir, prompts):
        """Colocated use: the trainer syncs while the engine sleeps; the engine wakes and samples the new weights."""
        from pathlib import Path

        from safetensors.torch import load_file

        base = load_file(str(Path(model_dir) / "model.safetensors"))
        gen = torch.Generator().manual_seed(5)
        new = {k: (v + 0.05 * torch.randn(v.shape, generator=gen)).cuda() for k, v in base.items()}
        fresh_engine.sleep()
        fresh_engine.load_weights(iter(new.items()))
        out = fresh_engine.generate(prompts, SamplingParams(n=2, max_new_tokens=8, temperature=1.0, logprobs=True, seed=3))
        ref = reference_log_probs(reference_model(model_dir, {k: v.cpu() for k, v in new.items()}), out, 1.0)
        rm = out.tensors["response_mask"].bool()
        torch.testing.assert_close(out.tensors["rollout_log_probs"][rm], ref[rm], atol=self.logprob_atol, rtol=0)
        assert out.meta["rollout/weight_sync_s"] > 0


# Only the sleep / colocation tests defined in TestVLLMSleepGPU run there; the inherited suite ran above.
for _name in [n for n in dir(TestVLLMRolloutGPU) if n.startswith("test_") and n not in vars(TestVLLMSleepGPU)]:
    setattr(TestVLLMSleepGPU, _name, None)
del _name
