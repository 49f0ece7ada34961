"""Bucketed weight gathering (issue 54): the full weights a sharded actor hands the rollout engine come from one
all-gather per bucket of local shards instead of one per tensor, bit-identical to ``DTensor.full_tensor()``, each
byte of a shard sent once (padding to the bucket's row chunk aside)."""

from __future__ import annotations

import pytest
import torch
from rl_core.backends import WorkerContext
from rl_core_testing.distributed import run_distributed
from rl_core_testing.train_conformance import default_config

from rl_train_fsdp import sharding
from rl_train_fsdp.engine import build_engine

pytestmark = pytest.mark.usefixtures("one_thread")


def _counting(calls):
    real = torch.distributed.all_gather

    def all_gather(tensors, tensor, group=None, async_op=False):
        calls.append(tensor.numel() * tensor.element_size())
        return real(tensors, tensor, group=group, async_op=async_op)

    return all_gather


def _gather(rank, world, model_dir):
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    actor = build_engine("actor", default_config(model_dir), WorkerContext(rank=rank, world_size=world))
    reference = {name: sharding.full_tensor(t).clone() for name, t in actor.model.state_dict(keep_vars=True).items()}
    calls: list[int] = []
    real = dist.all_gather
    dist.all_gather = _counting(calls)
    try:
        small = [(n, t.clone()) for n, t in sharding.iter_full_weights(actor.model, bucket_bytes=4096)]
        small_calls = list(calls)
        calls.clear()
        big = [(n, t.clone()) for n, t in sharding.iter_full_weights(actor.model)]
        big_calls = list(calls)
        # uneven rows (DTensor's chunking leaves the last rank fewer rows, or none)
        mesh = init_device_mesh("cpu", (world,))
        odd = {f"odd{r}": torch.arange(r * 7, dtype=torch.float32).reshape(r, 7) if r else torch.zeros(0, 3) for r in (1, 3, 5)}
        dts = [(n, distribute_tensor(t, mesh, [Shard(0)])) for n, t in odd.items()]
        regathered = dict(sharding._gather_bucket(dts))
    finally:
        dist.all_gather = real
    unique = {id(t): t for t in actor.model.state_dict(keep_vars=True).values()}.values()  # tied weights once
    local_bytes = sum(t.to_local().numel() * t.element_size() for t in unique)
    return {"reference": reference, "small": small, "big": big, "small_calls": small_calls, "big_calls": big_calls,
            "odd": odd, "regathered": regathered, "local_bytes": local_bytes,
            "tensors": sum(1 for _ in actor.model.state_dict(keep_vars=True))}


@pytest.mark.dist
def test_bucketed_gather_equals_full_tensor_and_sends_each_byte_once(tiny_model_dir):
    outs = run_distributed(_gather, 2, str(tiny_model_dir("qwen2")))  # q/k/v biases: 1-D shards too
    for o in outs:
        for weights in (o["small"], o["big"]):
            assert [n for n, _ in weights] == [n for n in o["reference"] if n in dict(weights)]  # state_dict order, tied once
            for name, t in weights:
                assert torch.equal(t, o["reference"][name]), name
        assert 1 == len(o["big_calls"]) < o["tensors"]  # the whole tiny model in one collective
        assert 1 < len(o["small_calls"]) < o["tensors"]  # 4 KiB buckets: several, still fewer than one per tensor
        sent = sum(o["big_calls"])  # this rank's contribution: its shards, padded to the row chunk at most
        assert o["local_bytes"] <= sent <= o["local_bytes"] * 1.1
        for name, t in o["odd"].items():
            assert torch.equal(o["regathered"][name], t), name
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(outs[0]["big"], outs[1]["big"]))
