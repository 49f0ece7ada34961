"""The host-memory estimate of a GPU run (rl_core.plan.memory_host), its refusal in rlcore check, and the pinned arena
that keeps offloaded state at its size (rl_core.train_engine.offload.HostArena). Numbers worked by hand."""

from __future__ import annotations

from pathlib import Path

import torch
from rl_core.config.load import load_config
from rl_core.plan.memory import GB, ModelShape
from rl_core.plan.memory_host import HOST_RUNTIME_GB, host_estimate

TINY_DATA = Path(__file__).resolve().parents[1] / "fixtures" / "data" / "tiny_gsm8k.jsonl"
# hidden 4, 1 layer, 2 heads of 2 (1 KV head), MLP 8, vocab 10, untied: attention 4*4 + 2*4*2 + 4*4 = 48, layer
# 48 + 3*4*8 + 2*4 = 152, P = 2*10*4 + 152 + 4 (final norm) = 236
SHAPE = ModelShape(hidden=4, intermediate=8, layers=1, heads=2, kv_heads=1, head_dim=2, vocab=10, tied=False, qkv_bias=False, source="hand")
RUNTIME = HOST_RUNTIME_GB * GB


def _config(*overrides):
    return load_config(None, ["model.path=unused", f"data.train_files=[{TINY_DATA}]", "trainer.device=cuda", *overrides])


def test_offload_terms_by_hand():
    assert SHAPE.params == 236
    both = ["actor.fsdp_config.param_offload=true", "actor.fsdp_config.optimizer_offload=true", "rollout.enable_sleep=false"]
    est = host_estimate(_config(*both), SHAPE)
    assert est.terms == {"process runtime (python, torch, CUDA libraries)": RUNTIME, "actor parameters, pinned (param_offload)": 4 * 236,
                         "actor AdamW state, pinned (optimizer_offload)": 8 * 236, "pinned segments' unused tails (at most)": 2 * GB}
    # hf_final: a shard of float32 weights (here all of them) and safetensors' serialized copy, wherever the parameters are
    assert est.load == RUNTIME + 4 * 236 and est.peak == RUNTIME + 12 * 236 + 2 * GB + 2 * 4 * 236 and est.export == 2 * 4 * 236
    assert host_estimate(_config(both[1], both[2]), SHAPE).export == 2 * 4 * 236
    # two GPUs, sharded: FSDP2's CPUOffloadPolicy keeps each rank's shard of parameters, gradients and AdamW: 16P / 2 per process
    est = host_estimate(_config(*both, "trainer.n_gpus_per_node=2"), SHAPE, world_size=2)
    assert est.terms["actor shard on the host (sharded offload: parameters, gradients, AdamW)"] == 2 * 16 * 236 / 2
    assert est.load == 2 * RUNTIME + 2 * 4 * 236  # each process builds the float32 model on the host first
    # the hf rollout asleep holds its weights on the host (a full fine-tune; no GPU here: counted as not kept) ...
    sleeping = host_estimate(_config("model.dtype=bfloat16"), SHAPE)
    assert sleeping.terms["hf rollout weights asleep in host memory (rollout.enable_sleep)"] == 2 * 236
    # ... but not without sleep (LoRA adapter sync frees them instead: plugins/lora/tests/test_lora_host_disk.py)
    assert len(host_estimate(_config("rollout.enable_sleep=false"), SHAPE).terms) == 1


def test_the_final_model_s_host_and_disk_bytes():
    """hf_final: the host holds one shard at a time (5 GB, the writer's limit) however big the model; on disk a full
    fine-tune writes 4P (LoRA's: plugins/lora/tests/test_lora_host_disk.py)."""
    from rl_core.plan.disk import estimate_disk
    from rl_core.plan.memory_host import EXPORT_SHARD_BYTES, export_bytes
    from rl_core.train_engine.hf_export import MAX_SHARD_BYTES

    assert EXPORT_SHARD_BYTES == MAX_SHARD_BYTES
    assert export_bytes(_config(), 7_000_000_000, 0, 2, False) == 2 * MAX_SHARD_BYTES  # a 7B float32 export: 28 GB in 5 GB shards
    assert estimate_disk(_config(), SHAPE).final_model == 4 * 236


def test_a_checkpoint_save_counts_the_device_state_torch_s_writer_copies_to_the_host():
    """DCP keeps a host copy of every device tensor until the rank's file closes: 12P without offload (per process),
    nothing for state already in offload's host buffers, 12A under LoRA; only when checkpoints are written."""
    ckpt = ["trainer.save_freq=5", "rollout.enable_sleep=false"]
    assert host_estimate(_config("rollout.enable_sleep=false"), SHAPE).checkpoint == 0  # save_freq=-1: none written
    plain = host_estimate(_config(*ckpt), SHAPE)
    assert plain.checkpoint == 12 * 236 and plain.peak == RUNTIME + 12 * 236
    assert "peak while writing a checkpoint (DCP)" in "\n".join(plain.lines())
    both = ["actor.fsdp_config.param_offload=true", "actor.fsdp_config.optimizer_offload=true"]
    assert host_estimate(_config(*ckpt, *both), SHAPE).checkpoint == 0  # written from the pinned buffers themselves
    assert host_estimate(_config(*ckpt, both[1]), SHAPE).checkpoint == 4 * 236  # the parameters on the GPU are copied
    two = host_estimate(_config(*ckpt, "trainer.n_gpus_per_node=2"), SHAPE, world_size=2)
    assert two.checkpoint == 2 * 12 * 236 / 2  # two processes, each its half


def test_check_refuses_a_run_the_host_cannot_hold_and_names_what_to_change():
    from rl_core.cli.check_target import Target, parse_target, target_problems
    from rl_core.plan.memory_checks import host_memory_problems
    from rl_core.plugins import get_registry

    # Qwen2.5-7B (7.6B parameters) full fine-tune with both offloads on one GPU: 4P + 8P pinned + the rollout asleep 2P ~ 110 GiB
    seven_b = _config("model.path=Qwen/Qwen2.5-7B", "trainer.n_gpus_per_node=1", "model.dtype=bfloat16", "data.train_batch_size=8",
                      "actor.ppo_mini_batch_size=8", "actor.fsdp_config.param_offload=true", "actor.fsdp_config.optimizer_offload=true")
    (p,) = host_memory_problems(seven_b, get_registry(), available=64 * GB)
    assert p.key == "actor.fsdp_config.optimizer_offload" and "of host memory per node" in p.what and "64 GiB of RAM" in p.what
    assert "rollout.enable_sleep=false" in p.fix and "a node with at least" in p.fix
    assert host_memory_problems(seven_b, get_registry(), available=256 * GB) == []
    assert parse_target("gpu:1x80GB,ram=64GB") == Target("cuda", 1, 80.0, 64.0)
    assert [q.key for q in target_problems(seven_b, parse_target("gpu:1x80GB,ram=64GB"), get_registry())] == [p.key]
    assert target_problems(seven_b, parse_target("gpu:1x80GB")) == []  # the RAM not said: nothing compared
    assert parse_target("gpu:1x80GB,ram=lots").key == "--target"


def test_pinned_arena_packs_tensors_into_segments_without_rounding_each():
    from rl_core.train_engine.offload import HostArena

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
