"""The host-memory estimate of a GPU run (rl_memory_estimate.host) without a feature's terms (offload's:
plugins/offload/tests/test_offload_host.py; LoRA's: plugins/lora/tests/test_lora_host_disk.py). Numbers worked by hand."""

from __future__ import annotations

from pathlib import Path

from rl_core.config.load import load_config
from rl_core.plan.memory import GB, ModelShape
from rl_memory_estimate.host import HOST_RUNTIME_GB, host_estimate

TINY_DATA = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "data" / "tiny_gsm8k.jsonl"
# hidden 4, 1 layer, 2 heads of 2 (1 KV head), MLP 8, vocab 10, untied: attention 4*4 + 2*4*2 + 4*4 = 48, layer
# 48 + 3*4*8 + 2*4 = 152, P = 2*10*4 + 152 + 4 (final norm) = 236
SHAPE = ModelShape(hidden=4, intermediate=8, layers=1, heads=2, kv_heads=1, head_dim=2, vocab=10, tied=False, qkv_bias=False, source="hand")
RUNTIME = HOST_RUNTIME_GB * GB


def _config(*overrides):
    return load_config(None, ["model.path=unused", f"data.train_files=[{TINY_DATA}]", "trainer.device=cuda", *overrides])


def test_runtime_and_the_hf_rollout_asleep():
    est = host_estimate(_config("rollout.enable_sleep=false"), SHAPE)
    assert est.terms == {"process runtime (python, torch, CUDA libraries)": RUNTIME} and est.load == RUNTIME + 4 * 236
    # hf_final: a shard of float32 weights (here all of them) and safetensors' serialized copy
    assert est.export == 2 * 4 * 236 and est.peak == RUNTIME + 2 * 4 * 236
    assert host_estimate(_config("trainer.n_gpus_per_node=2", "rollout.enable_sleep=false"), SHAPE, world_size=2).load == 2 * RUNTIME + 2 * 4 * 236
    # the hf rollout asleep holds its weights on the host (a full fine-tune; no GPU here: counted as not kept)
    sleeping = host_estimate(_config("model.dtype=bfloat16"), SHAPE)
    assert sleeping.terms["hf rollout weights asleep in host memory (rollout.enable_sleep)"] == 2 * 236


def test_the_final_model_s_host_and_disk_bytes():
    """hf_final: the host holds one shard at a time (5 GB, the writer's limit) however big the model; on disk a full
    fine-tune writes 4P (LoRA's: plugins/lora/tests/test_lora_host_disk.py)."""
    from rl_memory_estimate.disk import estimate_disk
    from rl_memory_estimate.host import EXPORT_SHARD_BYTES, export_bytes
    from rl_core.train_engine.hf_export import MAX_SHARD_BYTES

    assert EXPORT_SHARD_BYTES == MAX_SHARD_BYTES
    assert export_bytes(_config(), 7_000_000_000, 0, 2, False) == 2 * MAX_SHARD_BYTES  # a 7B float32 export: 28 GB in 5 GB shards
    assert estimate_disk(_config(), SHAPE).final_model == 4 * 236


def test_a_checkpoint_save_counts_the_device_state_torch_s_writer_copies_to_the_host():
    """DCP keeps a host copy of every device tensor until the rank's file closes: 12P without offload (per process),
    only when checkpoints are written."""
    ckpt = ["trainer.save_freq=5", "rollout.enable_sleep=false"]
    assert host_estimate(_config("rollout.enable_sleep=false"), SHAPE).checkpoint == 0  # save_freq=-1: none written
    plain = host_estimate(_config(*ckpt), SHAPE)
    assert plain.checkpoint == 12 * 236 and plain.peak == RUNTIME + 12 * 236
    assert "peak while writing a checkpoint (DCP)" in "\n".join(plain.lines())
    two = host_estimate(_config(*ckpt, "trainer.n_gpus_per_node=2"), SHAPE, world_size=2)
    assert two.checkpoint == 2 * 12 * 236 / 2  # two processes, each its half


