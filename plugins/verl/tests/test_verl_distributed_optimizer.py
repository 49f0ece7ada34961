"""Megatron's distributed optimizer (issue #37): verl's ``override_transformer_config.use_distributed_optimizer`` (and Megatron
Lite's ``impl_cfg.optimizer``) map to ``train.distributed_optimizer``, which the megatron backend runs as AdamW state dealt
over the ranks holding the same weights (its equality with the plain optimizer: plugins/train_megatron/tests/
test_megatron_moe.py); a backend without it refuses the key; the memory estimate divides AdamW's state over every rank."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rl_core.config.load import load_config
from rl_core.plugins import get_registry
from rl_core.plan.checks import plan_for
from rl_core.plan.resolver import resolve

DATA = "data.train_files=" + str(Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "data" / "tiny_gsm8k.jsonl")


def _resolve(model: Path, *overrides):
    registry = get_registry()
    config = load_config(None, [f"model.path={model}", "model.random_init=true", DATA, *overrides], profile="rl-core")
    stack, problems = plan_for(config, registry, devices=False)
    return stack, [p for p in problems if p.severity == "error"]


def _dense(tmp_path) -> Path:
    (tmp_path / "config.json").write_text(json.dumps({
        "model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
        "head_dim": 128, "intermediate_size": 12288, "vocab_size": 151936, "num_hidden_layers": 36}))  # Qwen3-8B's shape
    return tmp_path


def test_backends_without_a_distributed_optimizer_refuse_the_key(tmp_path):
    if "fsdp" not in get_registry().cards["train"]:
        pytest.skip("needs the rl-train-fsdp plugin")
    _, errs = _resolve(_dense(tmp_path), "train.name=fsdp", "train.distributed_optimizer=true")
    (p,) = errs
    assert p.key == "train.distributed_optimizer" and "shards the AdamW state over every rank already" in p.what


def test_memory_estimate_deals_adamw_over_every_rank(tmp_path):
    from rl_memory_estimate.estimate import estimate

    if "megatron" not in get_registry().cards["train"]:
        pytest.skip("needs the rl-train-megatron plugin")
    terms = {}
    for on in (False, True):
        stack, errs = _resolve(_dense(tmp_path), "train.name=megatron", "trainer.n_gpus_per_node=8", "trainer.device=cuda",
                               "train.tensor_model_parallel_size=2", f"train.distributed_optimizer={str(on).lower()}")
        assert not errs, [p.render() for p in errs]
        est = estimate(stack.config, stack.sizes, rollout=stack.rollout, train=stack.train)
        terms[on] = est.terms["actor AdamW state"]
    assert terms[True] == pytest.approx(terms[False] / 4)  # TP 2 on 8 devices: 4 data-parallel replicas share it


def test_owners_are_dealt_by_size():
    zero = pytest.importorskip("rl_train_megatron.zero", reason="needs the rl-train-megatron plugin")
    assert zero.deal([10, 1, 1, 10, 4], 2) == [0, 1, 1, 1, 0]
    assert zero.deal([5, 5, 5], 1) == [0, 0, 0]
