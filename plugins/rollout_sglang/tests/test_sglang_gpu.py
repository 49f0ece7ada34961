"""The SGLang engine on a GPU in bf16: the rollout conformance suite, memory release / resume and colocated weight sync.

Runs where CUDA and a GPU build of SGLang are installed (SGLang 0.5.17 + sglang-kernel 0.4.5 on the image's torch 2.11
+ CUDA 13: bench/DEVICE_RUNBOOK.md "Machine C"); skips elsewhere with the reason. Ran on one H100 on 2026-11-26: 24
passed, 1 skipped (bench/results/sglang_gpu_h100/README.md). Not run on a GPU since: the tagged release / resume
(session 24) and the no-host-copy class.

One engine serves the conformance class (as on CPU: SGLang starts in tens of seconds), started with
``enable_deterministic_inference`` (SGLang honours per-request seeds on GPU only then; it also picks the pytorch
sampler) and without CUDA graphs (start-up time). Tolerance as for vLLM on GPU (test_vllm_gpu.py): the reference is a
float32 transformers forward pass, SGLang computes in bf16, so sampled tokens' log-probs may differ by a few hundredths
of a nat on the tiny model; greedy tokens may flip where two logits are within bf16 rounding.

The memory class starts its own engine with ``rollout.enable_sleep`` (SGLang's memory saver, weights backed up on the
host): what release frees is read with ``torch.cuda.mem_get_info`` (device-wide: SGLang's scheduler is another process).
The no-host-copy class starts one more, with ``enable_weights_cpu_backup=false``.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU (SGLang's GPU build); on CPU see test_sglang_conformance.py", allow_module_level=True)
try:
    import sglang  # noqa: F401
except Exception as exc:  # noqa: BLE001
    pytest.skip(f"needs the SGLang engine (pip install 'rl-rollout-sglang[gpu]'): {type(exc).__name__}: {exc}", allow_module_level=True)

import attrs  # noqa: E402
import test_sglang_conformance as cpu_suite  # noqa: E402  (a module, so its CPU classes are not collected here)
from rl_core.backends import SamplingParams, WorkerContext  # noqa: E402
from rl_core_testing.rollout_conformance import reference_log_probs, reference_model  # noqa: E402
from rl_core_testing.tiny_model import make_tiny_model_dir  # noqa: E402
from rl_rollout_sglang.engine import SGLangRollout  # noqa: E402

pytestmark = [pytest.mark.sglang, pytest.mark.gpu]

GPU_KWARGS = {"enable_deterministic_inference": True, "disable_cuda_graph": True}


def _gpu_config(model_dir, enable_sleep=False, **rollout):
    kwargs = {**GPU_KWARGS, **dict(rollout.pop("engine_kwargs", None) or {})}
    cfg = cpu_suite.TestSGLangRollout().make_config(model_dir, engine_kwargs=kwargs, gpu_memory_utilization=0.2,
                                                   enable_sleep=enable_sleep, **rollout)
    return attrs.evolve(cfg, model=attrs.evolve(cfg.model, dtype="bfloat16"))


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """One tiny model and one bf16 SGLang engine on cuda:0 for the conformance class."""
    model_dir = make_tiny_model_dir(tmp_path_factory.mktemp("sglang_model"), cpu_suite.ARCH, hidden=cpu_suite.HIDDEN,
                                    heads=cpu_suite.HEADS, kv_heads=cpu_suite.KV_HEADS, seed=0)
    adapter = SGLangRollout(_gpu_config(model_dir), WorkerContext(device="cuda"))
    yield model_dir, adapter.client
    adapter.shutdown()


class TestSGLangRolloutGPU(cpu_suite.TestSGLangRollout):
    """bf16 SGLang on CUDA (see the module docstring for the tolerance)."""

    logprob_atol = 0.05
    greedy_exact = False
    torch_threads = None

    def make_config(self, model_dir, **rollout):
        return _gpu_config(model_dir, **rollout)

    def make_engine(self, model_dir, config):
        return SGLangRollout(config, WorkerContext(device="cuda"), client=self.client)

    # CPU-only facts of the parent class that do not hold (or mean nothing) on a GPU
    test_engine_start_keeps_threads_and_rng = None


class TestSGLangMemoryGPU:
    """Release / resume and sync while released, on an engine of its own (memory saver on); tests in this order."""

    @pytest.fixture(scope="class")
    def setup(self, shared):
        model_dir = shared[0]
        eng = SGLangRollout(_gpu_config(model_dir, enable_sleep=True), WorkerContext(device="cuda"))
        yield model_dir, eng
        eng.shutdown()

    def test_release_frees_memory_and_resume_restores_generation(self, setup):
        model_dir, eng = setup
        prompts = cpu_suite.prompt_batch(model_dir)
        params = SamplingParams(n=2, max_new_tokens=8, temperature=1.0, logprobs=True, seed=11)
        before = eng.generate(prompts, params)
        torch.cuda.synchronize()
        free0 = torch.cuda.mem_get_info()[0]
        t0 = time.perf_counter()
        eng.sleep()
        release_s = time.perf_counter() - t0
        freed = torch.cuda.mem_get_info()[0] - free0
        t0 = time.perf_counter()
        eng.wake_up()
        resume_s = time.perf_counter() - t0
        back = free0 - torch.cuda.mem_get_info()[0]
        print(f"\nsglang release: freed {freed / 2**20:.0f} MiB in {release_s:.3f} s; resume took back {back / 2**20:.0f} MiB in {resume_s:.3f} s")
        # the KV cache alone is most of gpu_memory_utilization=0.2 of the card
        assert freed > 2**28, f"release_memory_occupation freed only {freed / 2**20:.0f} MiB"
        after = eng.generate(prompts, params)
        assert torch.equal(after.tensors["responses"], before.tensors["responses"])  # the weights came back (host backup)

    def test_later_releases_reuse_the_pinned_host_copy(self, setup):
        """TMS_RETAIN_CPU_BACKUP=1 (set by the adapter): the pinned copy of the weights is kept between releases, so a
        second cycle skips pinning (its time printed) and still brings the same weights back."""
        model_dir, eng = setup
        prompts = cpu_suite.prompt_batch(model_dir)
        params = SamplingParams(n=2, max_new_tokens=8, temperature=1.0, logprobs=True, seed=11)
        before = eng.generate(prompts, params)
        times = []
        for _ in range(2):
            eng.sleep()
            eng.wake_up()
            out = eng.generate(prompts, params)
            times.append((out.meta["rollout/sleep_s"], out.meta["rollout/wake_s"]))
            assert torch.equal(out.tensors["responses"], before.tensors["responses"])
        print(f"\nsglang release / resume s, two cycles: {times}")

    def test_sync_while_released_then_generate_follows_new_weights(self, setup):
        """Colocated use: the trainer syncs while the engine is released; it resumes, loads and samples the new weights."""
        from safetensors.torch import load_file

        model_dir, eng = setup
        base = load_file(str(Path(model_dir) / "model.safetensors"))
        gen = torch.Generator().manual_seed(5)
        new = {k: (v + 0.05 * torch.randn(v.shape, generator=gen)).cuda() for k, v in base.items()}
        eng.sleep()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        eng.load_weights(iter(new.items()))
        print(f"\nsglang sync from cuda tensors (resume included): {time.perf_counter() - t0:.3f} s")
        prompts = cpu_suite.prompt_batch(model_dir)
        out = eng.generate(prompts, SamplingParams(n=2, max_new_tokens=8, temperature=1.0, logprobs=True, seed=3))
        ref = reference_log_probs(reference_model(model_dir, {k: v.cpu() for k, v in new.items()}), out, 1.0)
        rm = out.tensors["response_mask"].bool()
        torch.testing.assert_close(out.tensors["rollout_log_probs"][rm], ref[rm], atol=TestSGLangRolloutGPU.logprob_atol, rtol=0)

    def test_every_sync_is_verified_on_the_gpu(self, setup):
        """rl_core.weight_sync_check reads the bf16 engine's elements back (rl_rollout_sglang.held) and they match."""
        from rl_core.weight_sync_check import load_verified
        from safetensors.torch import load_file

        model_dir, eng = setup
        base = load_file(str(Path(model_dir) / "model.safetensors"))
        weights = {k: v.to(torch.bfloat16).cuda() for k, v in base.items()}
        assert load_verified(eng, iter(weights.items()), None, engine_name="sglang", version=1) == len(weights)


class TestSGLangNoHostCopyGPU:
    """``enable_weights_cpu_backup=false``: released weights are dropped; a synced engine releases them, a generation
    without a sync in between is refused, and the next sync brings the engine back to exact weights."""

    def test_release_without_a_host_copy_then_sync(self, shared):
        from safetensors.torch import load_file

        model_dir = shared[0]
        eng = SGLangRollout(_gpu_config(model_dir, enable_sleep=True, engine_kwargs={"enable_weights_cpu_backup": False}),
                            WorkerContext(device="cuda"))
        try:
            base = load_file(str(Path(model_dir) / "model.safetensors"))
            eng.load_weights(iter({k: v.cuda() for k, v in base.items()}.items()))
            eng.sleep()
            eng.wake_up()
            prompts = cpu_suite.prompt_batch(model_dir)
            params = SamplingParams(n=2, max_new_tokens=8, temperature=1.0, logprobs=True, seed=3)
            with pytest.raises(RuntimeError, match="without a host copy"):
                eng.generate(prompts, params)
            gen = torch.Generator().manual_seed(7)
            new = {k: v + 0.05 * torch.randn(v.shape, generator=gen) for k, v in base.items()}
            eng.load_weights(iter({k: v.cuda() for k, v in new.items()}.items()))
            out = eng.generate(prompts, params)
            print(f"\nsglang without a host copy: release {out.meta['rollout/sleep_s']:.3f} s, resumes {out.meta['rollout/wake_s']:.3f} s")
            ref = reference_log_probs(reference_model(model_dir, new), out, 1.0)
            rm = out.tensors["response_mask"].bool()
            torch.testing.assert_close(out.tensors["rollout_log_probs"][rm], ref[rm], atol=TestSGLangRolloutGPU.logprob_atol, rtol=0)
        finally:
            eng.shutdown()
