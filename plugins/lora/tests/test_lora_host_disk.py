"""LoRA's terms of the host-memory and disk estimates (rl_memory_estimate.host / rl_memory_estimate.disk), read through the
plan's features (rl-lora's FeatureCard): a frozen base in the compute dtype and A adapter parameters. Numbers worked by
hand, on the same hand-made shape as tests/core/test_memory_host.py."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from rl_core.config.load import load_config
from rl_memory_estimate.disk import estimate_disk
from rl_core.plan.features import Features, load_features
from rl_core.plan.memory import GB, ModelShape
from rl_memory_estimate.host import EXPORT_SHARD_BYTES, HOST_RUNTIME_GB, export_bytes, host_estimate
from rl_core.plugins import get_registry

TINY_DATA = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "data" / "tiny_gsm8k.jsonl"
# hidden 4, 1 layer, 2 heads of 2 (1 KV head), MLP 8, vocab 10, untied: P = 236 (tests/core/test_memory_host.py)
SHAPE = ModelShape(hidden=4, intermediate=8, layers=1, heads=2, kv_heads=1, head_dim=2, vocab=10, tied=False, qkv_bias=False, source="hand")
RUNTIME = HOST_RUNTIME_GB * GB
LORA = ["model.lora_rank=2", "model.lora_alpha=4"]
BOTH = ["actor.fsdp_config.param_offload=true", "actor.fsdp_config.optimizer_offload=true", "rollout.enable_sleep=false"]


def _config(*overrides):
    return load_config(None, ["model.path=unused", f"data.train_files=[{TINY_DATA}]", "trainer.device=cuda", *overrides])


def _features():
    features = load_features(get_registry(), [])
    assert [f.card.name for f in features.loaded if f.card.provider.distribution == "rl-lora"] == ["lora"]
    return features


def test_host_terms_under_lora_by_hand():
    f = _features()
    assert SHAPE.params == 236
    # LoRA r=2 on every linear layer: A = 2 * (8 + 6 + 6 + 8 + 12 + 12 + 12) = 128; bf16 base 2P
    est = host_estimate(_config(*BOTH, *LORA, "model.dtype=bfloat16"), SHAPE, features=f)
    assert est.terms["actor parameters, pinned (param_offload)"] == 2 * 236 + 4 * 128
    assert est.terms["actor AdamW state, pinned (optimizer_offload)"] == 8 * 128 and est.load == RUNTIME + 2 * 236
    assert est.export == 2 * 4 * 128  # the float32 adapters (a PEFT folder), not the model
    merged = ["trainer.save_merged_lora=true", "model.dtype=float32"]
    assert host_estimate(_config(*BOTH, *LORA, *merged), SHAPE, features=f).export == 2 * 4 * 236
    # without rl-lora's feature the same config is counted as a full fine-tune (what core and rl-offload alone know)
    no_lora = Features(tuple(x for x in f.loaded if x.card.name != "lora"))
    assert host_estimate(_config(*BOTH, *LORA, "model.dtype=bfloat16"), SHAPE, features=no_lora).terms["actor AdamW state, pinned (optimizer_offload)"] == 8 * 236
    # the hf rollout asleep keeps its weights on the host for a full fine-tune, but not with LoRA adapter sync
    assert "hf rollout weights asleep in host memory (rollout.enable_sleep)" in host_estimate(_config("model.dtype=bfloat16"), SHAPE, features=f).terms
    assert len(host_estimate(_config("model.dtype=bfloat16", "model.lora_rank=2"), SHAPE, features=f).terms) == 1
    # a checkpoint: DCP copies the adapters and their AdamW state, 12A
    assert host_estimate(_config("trainer.save_freq=5", "rollout.enable_sleep=false", *LORA), SHAPE, features=f).checkpoint == 12 * 128


def test_export_and_disk_under_lora():
    f = _features()
    lora = [*LORA, "model.dtype=bfloat16"]
    assert export_bytes(_config(*lora, "trainer.save_merged_lora=true"), 7_000_000_000, 80_000_000, 2, True) == 2 * EXPORT_SHARD_BYTES
    assert export_bytes(_config(*lora), 7_000_000_000, 80_000_000, 2, True) == 2 * 4 * 80_000_000
    adapter = estimate_disk(_config(*lora), SHAPE, features=f)
    assert adapter.final_model == 4 * 128 and adapter.per_checkpoint == 12 * 128  # untied: the adapters and their AdamW state
    assert "(hf_final: a LoRA adapter folder)" in "\n".join(adapter.lines())
    both = estimate_disk(_config(*lora, "trainer.save_merged_lora=true"), SHAPE, features=f)
    assert both.final_model == 4 * 128 + 2 * 236 and "a LoRA adapter folder + the merged weights" in "\n".join(both.lines())


def test_host_refusal_names_lora_with_its_host_peak():
    from rl_memory_estimate.checks import host_memory_problems

    # Qwen2.5-7B full fine-tune with both offloads on one GPU, a 64 GiB node (tests/core/test_memory_host.py)
    seven_b = _config("model.path=Qwen/Qwen2.5-7B", "trainer.n_gpus_per_node=1", "model.dtype=bfloat16", "data.train_batch_size=8",
                      "actor.ppo_mini_batch_size=8", "actor.fsdp_config.param_offload=true", "actor.fsdp_config.optimizer_offload=true")
    (p,) = host_memory_problems(seven_b, get_registry(), available=64 * GB)
    assert "LoRA (model.lora_rank=32 model.lora_alpha=64: host peak " in p.fix and "rollout.enable_sleep=false" in p.fix
    without_lora = SimpleNamespace(cards={"feature": {k: v for k, v in get_registry().cards["feature"].items() if k != "lora"}})
    (alone,) = host_memory_problems(seven_b, without_lora, available=64 * GB)  # no LoRA feature: offload and sleep named
    assert "LoRA" not in alone.fix and alone.key == p.key
