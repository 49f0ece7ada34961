"""The vLLM rollout with tensor parallelism 2 on two GPUs (NCCL): generation, a verified weight sync, generation with
the new weights; once with vLLM's own choice of all-reduce for the TP group (its CUDA-IPC custom all-reduce where the
GPUs allow it) and once with ``disable_custom_all_reduce`` (NCCL only).

Every earlier GPU run of the vLLM rollout used TP 1; session 13's first TP 2 run (R3, test_vllm_moe_routing.py -k tp2)
hung after the workers loaded the model. ``RL_CORE_STACK_DIR`` (a folder) makes each rank write its Python stacks there
shortly before the run's timeout, so a hang says where it is.

Tolerance as in test_vllm_gpu.py: the reference is a float32 transformers forward with the synced weights; vLLM
computes in bf16 (log-probs of sampled tokens within 0.05 nats on the tiny model).
"""

from __future__ import annotations

import os
import time
from types import SimpleNamespace

import pytest
import torch

if torch.cuda.device_count() < 2:
    pytest.skip("needs 2 CUDA GPUs (vLLM TP 2 over NCCL); on CPU see test_vllm_conformance.py's TP 2 tests", allow_module_level=True)
try:
    import vllm  # noqa: F401
except Exception as exc:  # noqa: BLE001
    pytest.skip(f"needs the vLLM engine (pip install 'rl-rollout-vllm[gpu]'): {type(exc).__name__}: {exc}", allow_module_level=True)

from test_vllm_conformance import _perturbed  # noqa: E402

from rl_core.backends import SamplingParams, WorkerContext  # noqa: E402
from rl_core_testing.rollout_conformance import prompt_batch, reference_log_probs, reference_model  # noqa: E402

pytestmark = [pytest.mark.vllm, pytest.mark.gpu, pytest.mark.dist]

TIMEOUT = 300


def _tp2_rank(rank, world_size, model_dir, custom_all_reduce):
    import faulthandler

    from rl_core.config.schema import DataConfig, ModelConfig, RolloutConfig, RunConfig, TrainerConfig
    from rl_core.weight_sync_check import load_verified
    from rl_rollout_vllm.engine import build

    stacks = os.environ.get("RL_CORE_STACK_DIR")
    if stacks:
        sink = open(os.path.join(stacks, f"stacks_{'custom' if custom_all_reduce else 'nccl'}_rank{rank}.txt"), "w")  # noqa: SIM115
        faulthandler.dump_traceback_later(TIMEOUT - 40, file=sink)
    kwargs = {"enforce_eager": True, **({} if custom_all_reduce else {"disable_custom_all_reduce": True})}
    cfg = RunConfig(
        model=ModelConfig(path=model_dir, dtype="bfloat16"),
        data=DataConfig(max_prompt_length=32, max_response_length=8),
        rollout=RolloutConfig(name="vllm", tensor_model_parallel_size=2, gpu_memory_utilization=0.2, engine_kwargs=kwargs),
        trainer=TrainerConfig(device="cuda", n_gpus_per_node=world_size),
    )
    times, t0 = {}, time.monotonic()
    eng = build(cfg, WorkerContext(rank=rank, world_size=world_size, local_rank=rank, device=f"cuda:{rank}"))
    times["build_s"] = time.monotonic() - t0
    try:
        params = SamplingParams(n=2, max_new_tokens=8, temperature=1.0, logprobs=True, seed=5)
        t = time.monotonic()
        before = eng.generate(prompt_batch(model_dir), params)
        times["generate_s"] = time.monotonic() - t
        new = _perturbed(model_dir, 1)
        t = time.monotonic()
        verified = load_verified(eng, new.items(), None, engine_name="vllm", version=1)
        times["sync_s"] = time.monotonic() - t
        after = eng.generate(prompt_batch(model_dir), params)
        return {"before": before.to_dict()["tensors"], "after": after.to_dict()["tensors"], "verified": verified,
                "tensors": len(new), "times": times}
    finally:
        eng.shutdown()


@pytest.mark.parametrize("custom_all_reduce", [False, True], ids=["nccl", "custom_all_reduce"])
def test_tp2_generates_and_syncs_verified_on_two_gpus(tmp_path, custom_all_reduce):
    """Both ranks of the TP group return the same samples; every tensor of the sync is verified on both workers; the
    samples after it have the new weights' log-probs (a float32 transformers reference within bf16 tolerance)."""
    from rl_core_testing.distributed import run_distributed
    from rl_core_testing.tiny_model import make_tiny_model_dir

    model_dir = str(make_tiny_model_dir(tmp_path / "m", "llama", hidden=128, heads=2, kv_heads=2))
    r0, r1 = run_distributed(_tp2_rank, 2, model_dir, custom_all_reduce, backend="nccl", timeout=TIMEOUT)
    print(f"TP 2 ({'custom all-reduce' if custom_all_reduce else 'NCCL'}): rank 0 {r0['times']}, rank 1 {r1['times']}")
    for r in (r0, r1):
        assert r["verified"] == r["tensors"], r["verified"]
    for phase in ("before", "after"):
        assert torch.equal(r0[phase]["responses"], r1[phase]["responses"]), phase
    out = SimpleNamespace(tensors=r0["after"])
    ref = reference_log_probs(reference_model(model_dir, _perturbed(model_dir, 1)), out, 1.0)
    rm = r0["after"]["response_mask"].bool()
    torch.testing.assert_close(r0["after"]["rollout_log_probs"][rm], ref[rm], atol=0.05, rtol=0)
