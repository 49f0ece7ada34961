"""rl-offload's terms of the host-memory estimate (rl_offload.memory.host_terms, through the plan's features), the
refusal of a run the node's RAM cannot hold, and the pinned arena that keeps offloaded state at its size
(rl_offload.offload.HostArena). Numbers worked by hand on tests/core/test_memory_host.py's shape (P = 236)."""

from __future__ import annotations

from pathlib import Path

import torch
from rl_core.config.load import load_config
from rl_core.plan.features import load_features
from rl_core.plan.memory import GB, ModelShape
from rl_memory_estimate.host import HOST_RUNTIME_GB, host_estimate
from rl_core.plugins import get_registry

TINY_DATA = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "data" / "tiny_gsm8k.jsonl"
SHAPE = ModelShape(hidden=4, intermediate=8, layers=1, heads=2, kv_heads=1, head_dim=2, vocab=10, tied=False, qkv_bias=False, source="hand")
RUNTIME = HOST_RUNTIME_GB * GB
BOTH = ["actor.fsdp_config.param_offload=true", "actor.fsdp_config.optimizer_offload=true"]


def _config(*overrides):
    return load_config(None, ["model.path=unused", f"data.train_files=[{TINY_DATA}]", "trainer.device=cuda", *overrides])


def _host(*overrides, world_size=1):
    return host_estimate(_config(*overrides), SHAPE, world_size=world_size, features=load_features(get_registry(), []))


def test_offload_terms_by_hand():
    assert SHAPE.params == 236
    est = _host(*BOTH, "rollout.enable_sleep=false")
    assert est.terms == {"process runtime (python, torch, CUDA libraries)": RUNTIME, "actor parameters, pinned (param_offload)": 4 * 236,
                         "actor AdamW state, pinned (optimizer_offload)": 8 * 236, "pinned segments' unused tails (at most)": 2 * GB}
    # hf_final: a shard of float32 weights (here all of them) and safetensors' serialized copy, wherever the parameters are
    assert est.load == RUNTIME + 4 * 236 and est.peak == RUNTIME + 12 * 236 + 2 * GB + 2 * 4 * 236 and est.export == 2 * 4 * 236
    # two GPUs, sharded: FSDP2's CPUOffloadPolicy keeps each rank's shard of parameters, gradients and AdamW: 16P / 2 per process
    est = _host(*BOTH, "rollout.enable_sleep=false", "trainer.n_gpus_per_node=2", world_size=2)
    assert est.terms["actor shard on the host (sharded offload: parameters, gradients, AdamW)"] == 2 * 16 * 236 / 2
    assert est.load == 2 * RUNTIME + 2 * 4 * 236  # each process builds the float32 model on the host first
    # without the feature loaded (no registry), offload adds nothing: the kernel has no offload terms of its own
    assert len(host_estimate(_config(*BOTH, "rollout.enable_sleep=false"), SHAPE).terms) == 1


def test_a_checkpoint_writes_offloaded_state_from_its_host_buffers():
    ckpt = ["trainer.save_freq=5", "rollout.enable_sleep=false"]
    assert _host(*ckpt).checkpoint == 12 * 236
    assert _host(*ckpt, *BOTH).checkpoint == 0  # written from the pinned buffers themselves
    assert _host(*ckpt, BOTH[1]).checkpoint == 4 * 236  # the parameters on the GPU are copied
    assert _host(*ckpt, *BOTH, "trainer.n_gpus_per_node=2", world_size=2).checkpoint == 2 * 12 * 236 / 2  # sharded: copied


def test_check_refuses_a_run_the_host_cannot_hold_and_names_what_to_change():
    from rl_core.cli.check_target import Target, parse_target, target_problems
    from rl_memory_estimate.checks import host_memory_problems

    # Qwen2.5-7B (7.6B parameters) full fine-tune with both offloads on one GPU: 4P + 8P pinned + the rollout asleep 2P ~ 110 GiB
    seven_b = _config("model.path=Qwen/Qwen2.5-7B", "trainer.n_gpus_per_node=1", "model.dtype=bfloat16", "data.train_batch_size=8",
                      "actor.ppo_mini_batch_size=8", "actor.fsdp_config.param_offload=true", "actor.fsdp_config.optimizer_offload=true")
    (p,) = host_memory_problems(seven_b, get_registry(), available=64 * GB)
    assert p.key == "actor.fsdp_config.optimizer_offload" and "of host memory per node" in p.what and "64 GiB of RAM" in p.what
    assert "rollout.enable_sleep=false" in p.fix and "a node with at least" in p.fix
    assert host_memory_problems(seven_b, get_registry(), available=256 * GB) == []
    # --target's ram= part is rl-memory-estimate's (its target_part hook): the node's RAM against the same estimate
    target = parse_target("gpu:1x80GB,ram=64GB", get_registry())
    assert (target.device, target.per_node, target.memory_gib, target.parts[0][:2]) == ("cuda", 1, 80.0, ("ram", 64.0))
    assert isinstance(target, Target) and target.describe() == "1 x cuda 80 GiB, 64 GiB RAM"
    assert [q.key for q in target_problems(seven_b, target, get_registry())] == [p.key]
    assert target_problems(seven_b, parse_target("gpu:1x80GB")) == []  # the RAM not said: nothing compared
    assert parse_target("gpu:1x80GB,ram=lots").key == "--target"
    assert parse_target("gpu:1x80GB,rma=64GB").key == "--target"  # a part no package reads


def test_pinned_arena_packs_tensors_into_segments_without_rounding_each():
    from rl_offload.offload import HostArena

    arena = HostArena(pin=False, segment_bytes=4096)
    a = arena.take(torch.Size([300]), torch.float32)  # 1200 bytes -> 1536 with alignment
    b = arena.take(torch.Size([10, 10]), torch.bfloat16)  # 200 -> 512
    c = arena.take(torch.Size([700]), torch.float32)  # 2800 -> 3072: no room left in the first segment -> a second one
    big = arena.take(torch.Size([2000]), torch.float32)  # 8000 > a segment: its own, rounded to 8192
    assert (a.shape, b.shape, b.dtype) == (torch.Size([300]), torch.Size([10, 10]), torch.bfloat16)
    assert arena.reserved == 4096 + 4096 + 8192 and [s[1] for s in arena.segments] == [1536 + 512, 3072, 8192]
    for i, t in enumerate((a, b, c, big)):  # every buffer its own memory
        t.fill_(i + 1)
    assert all(bool((t == i + 1).all()) for i, t in enumerate((a, b, c, big)))
    assert b.data_ptr() - a.data_ptr() == 1536 and c.data_ptr() == arena.segments[1][0].data_ptr()  # offsets aligned to ALIGN in a segment
