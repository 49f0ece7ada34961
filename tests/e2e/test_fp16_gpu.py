"""model.dtype=float16 on one GPU: 2 GRPO steps through ``rlcore train`` on the fsdp and megatron backends (float16
under ``torch.autocast`` / FSDP2's policy, float32 master weights, dynamic loss scaling) with the float16 hf rollout
and, where vLLM's GPU build is installed, vLLM with ``dtype="float16"`` (rl_core_testing.fp16_run checks each step:
loss scale 2**16 and no skipped step, finite gradient norm, rollout log-probs within 0.05 nats of the actor's,
every weight updated). The CPU runs of the same checks: plugins/train_{fsdp,megatron}/tests/test_*_fp16.py.
"""

from __future__ import annotations

import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU (the CPU runs: plugins/train_fsdp/tests/test_fsdp_fp16.py, "
                "plugins/train_megatron/tests/test_megatron_fp16.py)", allow_module_level=True)

pytestmark = [pytest.mark.gpu, pytest.mark.slow]


@pytest.mark.parametrize("rollout", ["hf", "vllm"])
@pytest.mark.parametrize("train", ["fsdp", "megatron"])
def test_two_step_grpo_fp16_on_a_gpu(tmp_path, train, rollout):
    from rl_core_testing.fp16_run import engine_missing, fp16_grpo_run

    if (why := engine_missing(rollout)) is not None:
        pytest.skip(why)
    if train == "megatron":
        pytest.importorskip("megatron.core", reason="needs megatron-core (pip install megatron-core==0.16.1)")
    extra = {"rollout__gpu_memory_utilization": 0.3, "rollout__tensor_model_parallel_size": 1} if rollout == "vllm" else {}
    fp16_grpo_run(tmp_path, nprocs=1, rollout=rollout, model=dict(arch="llama", hidden=128, layers=2, heads=2, kv_heads=2),
                  train__name=train, trainer__device="cuda", **extra)
