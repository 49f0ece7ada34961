"""MoE routing replay (``actor.router_replay``) on 2 GPUs over NCCL (the lead's device run; skipped without 2 CUDA devices).

What the CPU tests (test_megatron_router_replay.py, gloo, allgather dispatcher, float32) cannot show: megatron-core's
GPU-only ``alltoall`` token dispatcher under replay (the routers see the local tokens before the all-to-all), NCCL's
max-reduction of R2's recording, and bf16 autocast. EP 2 on 2 GPUs (each GPU a data-parallel replica, its half of the
step):

- float32: the alltoall run's recording equals the allgather run's bit for bit, and its log-probs under a random routing
  equal the allgather run's (1e-4: GPU kernels);
- bfloat16 (``model.dtype``): replaying the recorded routing gives log-probs bit-identical to the unreplayed forward,
  and a random routing moves them.

    PYTHONPATH=/tmp/site:core:plugins/train_megatron python -m pytest -q plugins/train_megatron/tests/test_megatron_router_replay_gpu.py
"""

from __future__ import annotations

import attrs
import pytest
import torch
from rl_core.backends import WorkerContext
from rl_core_testing.distributed import run_distributed
from rl_core_testing.tiny_model import make_tiny_model_dir
from rl_core_testing.train_conformance import default_config, make_step_batch

pytest.importorskip("megatron.core", reason="needs megatron-core (pip install megatron-core==0.16.1)")
pytestmark = [pytest.mark.megatron, pytest.mark.gpu, pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA devices (NCCL)")]


def _config(model_dir, dtype: str, dispatcher: str):
    cfg = default_config(model_dir)
    tc = {"moe_router_dtype": "fp32", "moe_token_dispatcher_type": dispatcher}
    train = attrs.evolve(cfg.train, name="megatron", expert_model_parallel_size=2, options={"transformer_config": tc})
    return attrs.evolve(cfg, train=train, model=attrs.evolve(cfg.model, dtype=dtype), actor=attrs.evolve(cfg.actor, router_replay="R2"))


def run(rank: int, world: int, config, step, routed, device: str = "cuda") -> dict:
    from rl_train_megatron.engine import build_engine

    half = len(step) // world
    sel = torch.arange(rank * half, (rank + 1) * half)
    mine = step.index(sel)
    actor = build_engine("actor", config, WorkerContext(rank=rank, world_size=world, device=device, seed=0))
    try:
        out = actor.compute_log_prob(mine, temperature=1.0)
        mine.tensors["routed_experts"] = out["routed_experts"]
        own = actor.compute_log_prob(mine, temperature=1.0)
        mine.tensors["routed_experts"] = routed[sel]
        other = actor.compute_log_prob(mine, temperature=1.0)
    finally:
        actor.shutdown()
    return {"recorded": out["routed_experts"], "log_probs": out["log_probs"].cpu(), "own": own["log_probs"].cpu(), "other": other["log_probs"].cpu()}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_tiny_model_dir(tmp_path_factory.mktemp("qwen3_moe"), "qwen3_moe", hidden=64, layers=2, seed=0)


def _routing(step, layers: int = 2, experts: int = 4, k: int = 2) -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    b, S = step.tensors["input_ids"].shape
    out = torch.stack([torch.randperm(experts, generator=g)[:k] for _ in range(b * S * layers)]).view(b, S, layers, k).to(torch.int16)
    out[~step.tensors["attention_mask"].bool()] = -1
    return out


def test_alltoall_dispatcher_records_and_replays_as_allgather(model_dir):
    step = make_step_batch(model_dir)
    routed = _routing(step)
    gather = run_distributed(run, 2, _config(model_dir, "float32", "allgather"), step, routed, timeout=600)
    a2a = run_distributed(run, 2, _config(model_dir, "float32", "alltoall"), step, routed, timeout=600)
    for g, a in zip(gather, a2a):
        assert torch.equal(a["recorded"], g["recorded"])
        torch.testing.assert_close(a["other"], g["other"], atol=1e-4, rtol=0)
        assert torch.equal(a["own"], a["log_probs"])


def test_bf16_replay_of_the_recorded_routing_is_bit_identical(model_dir):
    step = make_step_batch(model_dir)
    outs = run_distributed(run, 2, _config(model_dir, "bfloat16", "alltoall"), step, _routing(step), timeout=600)
    for o in outs:
        assert torch.equal(o["own"], o["log_probs"])
        assert (o["other"] - o["log_probs"]).abs().max() > 1e-3
