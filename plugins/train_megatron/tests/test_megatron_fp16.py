"""model.dtype=float16 on the megatron backend through ``rlcore train`` (GRPO, TP 2 on 2 CPU processes, gloo).

On the CPU the megatron engine computes in float32 whatever model.dtype says (see its docstring; on a GPU float16
runs under ``torch.autocast``), so this checks core's dynamic loss scaling (rl_core.train_engine.loss_scale) over
the megatron backend's gradients: the scaled loss weights through the TP backward, the unscaled gradients AdamW
steps on, the scale in the metrics; and the float16 rollout engine sampling from the synced weights.
"""

from __future__ import annotations

import pytest

pytest.importorskip("megatron.core", reason="needs megatron-core (pip install megatron-core==0.16.1)")

pytestmark = [pytest.mark.megatron, pytest.mark.slow, pytest.mark.dist]


@pytest.mark.parametrize("rollout", ["hf", "vllm"])
def test_two_step_grpo_megatron_tp2_fp16(tmp_path, rollout):
    from rl_core_testing.fp16_run import engine_missing, fp16_grpo_run

    if (why := engine_missing(rollout)) is not None:
        pytest.skip(why)
    # head size 64 (vLLM's CPU kernels), 2 KV heads (TP 2), untied llama: the LM head is sharded too
    fp16_grpo_run(tmp_path, nprocs=2, rollout=rollout, model=dict(arch="llama", hidden=128, layers=2, heads=2, kv_heads=2),
                  train__name="megatron", train__tensor_model_parallel_size=2)
