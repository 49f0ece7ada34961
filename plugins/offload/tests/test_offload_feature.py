"""rl-offload's feature card: the device estimate's terms with offload on, and a config that switches offload on
without rl-offload installed: an `rlcore check` problem naming the package."""

from __future__ import annotations

from pathlib import Path

from rl_core.config.load import load_config
from rl_core.plan.features import Features, load_features, missing_feature_problems
from rl_core.plan.memory import ModelShape
from rl_memory_estimate.estimate import actor_terms
from rl_core.plugins import get_registry

TINY_DATA = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "data" / "tiny_gsm8k.jsonl"
SHAPE = ModelShape(hidden=4, intermediate=8, layers=1, heads=2, kv_heads=1, head_dim=2, vocab=10, tied=False, qkv_bias=False, source="hand")


def _config(*overrides):
    return load_config(None, ["model.path=unused", f"data.train_files=[{TINY_DATA}]", "trainer.device=cuda", *overrides])


def test_device_terms_with_offload():
    features = load_features(get_registry(), [])
    full = actor_terms(_config(), SHAPE, 1, 2, features)
    assert full.states == {"actor parameters (fp32)": 4 * 236, "actor AdamW state": 8 * 236} and full.update == {"actor gradients (update)": 4 * 236}
    off = actor_terms(_config("actor.fsdp_config.param_offload=true", "actor.fsdp_config.optimizer_offload=true"), SHAPE, 1, 2, features)
    assert off.states == {"actor parameters (fp32, in host memory while generating)": 4 * 236, "actor AdamW state": 0.0}
    assert off.update == {"actor gradients (update)": 4 * 236, "AdamW state chunk on the device (offloaded, step)": 8 * 236}
    policy = actor_terms(_config("actor.fsdp_config.offload_policy=true"), SHAPE, 2, 2, features)  # counted as both switches
    assert policy.states["actor AdamW state"] == 0.0 and "actor parameters (fp32, in host memory while generating)" in policy.states
    assert [label for label, _ in features.alternatives(_config())][-1].startswith("offload: actor.fsdp_config.param_offload=true")


def test_offload_without_the_package_names_it():
    (p,) = missing_feature_problems(_config("actor.fsdp_config.optimizer_offload=true", "critic.fsdp_config.param_offload=true"), Features())
    assert p.key == "actor.fsdp_config.optimizer_offload" and "pip install rl-offload" in p.fix
    assert missing_feature_problems(_config(), Features()) == []
    assert missing_feature_problems(_config("actor.fsdp_config.optimizer_offload=true"), load_features(get_registry(), [])) == []
