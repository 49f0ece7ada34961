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
    # LoRA r=2 on every linear layer: A = 2 * (8 + 6 + 6 + 8 + 12 + 12 + 12) = 128; bf16 base 2P
    est = host_estimate(_config(*both, "model.lora_rank=2", "model.lora_alpha=4", "model.dtype=bfloat16"), SHAPE)
    assert est.terms["actor parameters, pinned (param_offload)"] == 2 * 236 + 4 * 128
    assert est.terms["actor AdamW state, pinned (optimizer_offload)"] == 8 * 128 and est.load == RUNTIME + 2 * 236
    assert est.export == 2 * 4 * 128  # the float32 adapters (a PEFT folder), not the model
    merged = ["trainer.save_merged_lora=true", "model.dtype=float32"]
    assert host_estimate(_config(*both, "model.lora_rank=2", "model.lora_alpha=4", *merged), SHAPE).export == 2 * 4 * 236
    # the hf rollout asleep holds its weights on the host (a full fine-tune; no GPU here: counted as not kept) ...
    sleeping = host_estimate(_config("model.dtype=bfloat16"), SHAPE)
    assert sleeping.terms["hf rollout weights asleep in host memory (rollout.enable_sleep)"] == 2 * 236
    # ... but not with LoRA adapter sync (freed and rebuilt instead), nor without sleep
    assert len(host_estimate(_config("model.dtype=bfloat16", "model.lora_rank=2"), SHAPE).terms) == 1
    assert len(host_estimate(_config("rollout.enable_sleep=false"), SHAPE).terms) == 1


def test_the_final_model_s_host_and_disk_bytes_full_and_lora():
    """hf_final: the host holds one shard at a time (5 GB, the writer's limit) however big the model; on disk a full
    fine-tune writes 4P, a LoRA run its float32 adapters 4A, plus the merged weights cP only when asked."""
    from rl_core.plan.disk import estimate_disk
    from rl_core.plan.memory_host import EXPORT_SHARD_BYTES, export_bytes
    from rl_core.train_engine.hf_export import MAX_SHARD_BYTES

    assert EXPORT_SHARD_BYTES == MAX_SHARD_BYTES
    assert export_bytes(_config(), 7_000_000_000, 0, 2) == 2 * MAX_SHARD_BYTES  # a 7B float32 export: 28 GB in 5 GB shards
    lora = ["model.lora_rank=2", "model.lora_alpha=4", "model.dtype=bfloat16"]
    assert export_bytes(_config(*lora, "trainer.save_merged_lora=true"), 7_000_000_000, 80_000_000, 2) == 2 * MAX_SHARD_BYTES
    assert export_bytes(_config(*lora), 7_000_000_000, 80_000_000, 2) == 2 * 4 * 80_000_000
    assert estimate_disk(_config(), SHAPE).final_model == 4 * 236
    adapter = estimate_disk(_config(*lora), SHAPE)
    assert adapter.final_model == 4 * 128 and adapter.per_checkpoint == 12 * 128  # untied: the adapters and their AdamW state
    assert "(hf_final: a LoRA adapter folder)" in "\n".join(adapter.lines())
    both = estimate_disk(_config(*lora, "trainer.save_merged_lora=true"), SHAPE)
    assert both.final_model == 4 * 128 + 2 * 236 and "a LoRA adapter folder + the merged weights" in "\n".join(both.lines())


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
    assert host_estimate(_config(*ckpt, "model.lora_rank=2", "model.lora_alpha=4"), SHAPE).checkpoint == 12 * 128
    two = host_estimate(_config(*ckpt, "trainer.n_gpus_per_node=2"), SHAPE, world_size=2)
    assert two.checkpoint == 2 * 12 * 236 / 2  # two processes, each its half


def test_check_refuses_a_run_the_host_cannot_hold_and_names_what_to_change():
    from rl_core.cli.check_target import Target, parse_target, target_problems
    from rl_core.lora.checks import host_memory_problems

    # Qwen2.5-7B (7.6B parameters) full fine-tune with both offloads on one GPU: 4P + 8P pinned + the rollout asleep 2P ~ 110 GiB
    seven_b = _config("model.path=Qwen/Qwen2.5-7B", "trainer.n_gpus_per_node=1", "model.dtype=bfloat16", "data.train_batch_size=8",
                      "actor.ppo_mini_batch_size=8", "actor.fsdp_config.param_offload=true", "actor.fsdp_config.optimizer_offload=true")
    (p,) = host_memory_problems(seven_b, available=64 * GB)
    assert p.key == "actor.fsdp_config.optimizer_offload" and "of host memory per node" in p.what and "64 GiB of RAM" in p.what
    assert "model.lora_rank=32" in p.fix and "rollout.enable_sleep=false" in p.fix and "a node with at least" in p.fix
    assert host_memory_problems(seven_b, available=256 * GB) == []
    assert parse_target("gpu:1x80GB,ram=64GB") == Target("cuda", 1, 80.0, 64.0)
    assert [q.key for q in target_problems(seven_b, parse_target("gpu:1x80GB,ram=64GB"))] == [p.key]
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
