"""The memory estimate under LoRA (rl_lora.memory, through the plan's features) and CPU offload: a 7B full fine-tune does not fit one 80 GB GPU; LoRA and offload would."""

from __future__ import annotations

from pathlib import Path

import attrs
from rl_core.config.load import load_config
from rl_core.config.normalize import normalize
from rl_core.plan.features import load_features
from rl_core.plan.memory import GB, model_shape
from rl_memory_estimate.estimate import estimate
from rl_core.plugins import get_registry
from rl_lora.memory import adapter_params

TINY_DATA = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "data" / "tiny_gsm8k.jsonl"
# the workload on one H100: 8 prompts x 8 samples, 128 + 256 tokens, bf16, gradient checkpointing
SEVEN_B = ["model.path=Qwen/Qwen2.5-7B", f"data.train_files=[{TINY_DATA}]", "trainer.device=cuda", "trainer.n_gpus_per_node=1",
           "data.train_batch_size=8", "rollout.n=8", "actor.ppo_mini_batch_size=8", "actor.ppo_micro_batch_size_per_gpu=4",
           "data.max_prompt_length=128", "data.max_response_length=256", "model.dtype=bfloat16", "model.enable_gradient_checkpointing=true"]


def _est(*overrides):
    config, sizes, problems = normalize(load_config(None, [*SEVEN_B, *overrides]))
    assert sizes is not None, problems
    return config, estimate(config, sizes, available=80 * GB, features=load_features(get_registry(), []))


def test_adapter_count_matches_peft_on_a_real_model():
    import pytest

    pytest.importorskip("peft")
    import torch
    from rl_core.plan.memory import shape_from_config
    from rl_core_testing.tiny_model import tiny_config
    from rl_lora.adapters import LoraSpec, apply_lora, trainable_parameters
    from transformers import AutoModelForCausalLM

    cfg = tiny_config("qwen2", hidden=32, layers=2, heads=4, kv_heads=2)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    for targets in ("all-linear", ("q_proj", "down_proj")):
        n = sum(p.numel() for p in trainable_parameters(apply_lora(AutoModelForCausalLM.from_config(cfg), LoraSpec(rank=4, alpha=8.0, target_modules=targets))))
        assert adapter_params(shape_from_config(cfg.to_dict(), "tiny"), 4, targets) == n
    del model


def test_seven_b_full_fine_tune_does_not_fit_one_80gb_gpu_and_lora_or_offload_would():
    config, full = _est()
    P = model_shape("Qwen/Qwen2.5-7B").params
    assert 7.0e9 < P < 7.7e9  # Qwen2.5-7B: 7.62B parameters
    assert full.fits is False and full.peak > 100 * GB
    assert full.terms["actor parameters (fp32)"] == 4 * P and full.terms["actor AdamW state"] == 8 * P
    text = "\n".join(full.lines())
    assert "does NOT fit" in text
    assert "LoRA: model.lora_rank=32" in text and "offload: actor.fsdp_config.param_offload=true" in text
    lora_line = next(a for a in full.advice if a.startswith("LoRA: "))
    offload_line = next(a for a in full.advice if a.startswith("offload: "))
    assert lora_line.endswith("fits") and "issue #32" not in lora_line  # LoRA is wired now (no "not wired" note)

    _, lora = _est("model.lora_rank=32", "model.lora_alpha=64")
    A = adapter_params(model_shape("Qwen/Qwen2.5-7B"), 32)
    # r=32 all-linear on Qwen2.5-7B: 28 layers x 32 x (q 3584+3584, k,v 2 x (3584+512), o 3584+3584, gate,up 2 x (3584+18944), down 18944+3584)
    assert A == 28 * 32 * (7168 + 8192 + 7168 + 45056 + 22528) == 80_740_352
    assert lora.fits is True and lora.peak < full.peak / 2
    assert lora.terms["actor base parameters (frozen, 16-bit)"] == 2 * P
    assert "actor AdamW state" not in lora.terms and "autocast weight copy (update)" not in lora.terms
    assert f"peak {lora.peak / GB:.1f} GiB" in lora_line

    _, off = _est("actor.fsdp_config.param_offload=true", "actor.fsdp_config.optimizer_offload=true")
    assert off.terms["actor AdamW state"] == 0 and off.peak < full.peak
    assert f"peak {off.peak / GB:.1f} GiB" in offload_line
    _, opt_only = _est("actor.fsdp_config.optimizer_offload=true")
    assert full.peak - opt_only.peak == 8 * P - 2**30  # AdamW state on the host, one 1 GiB chunk on the device at the step
    assert off.terms["actor parameters (fp32, in host memory while generating)"] == 4 * P  # on the device in the train phases

    # LoRA with a KL term: the reference is the same model with adapters off, not a second copy
    _, kl = _est("model.lora_rank=32", "actor.use_kl_loss=true")
    _, kl_full = _est("actor.use_kl_loss=true")
    assert "reference parameters" not in kl.terms and kl_full.terms["reference parameters"] == 2 * P
    assert attrs.has(type(kl))


def test_check_refuses_the_seven_b_full_fine_tune_on_one_80gb_gpu_naming_what_would_fit():
    from rl_memory_estimate.checks import memory_problems

    config = load_config(None, SEVEN_B)
    (p,) = memory_problems(config, get_registry(), available=80 * GB)
    assert p.severity == "error" and p.key == "model.lora_rank"
    assert "7.6B parameters need 113 GiB per GPU for their train states alone" in p.what and "80 GiB" in p.what
    assert "LoRA: model.lora_rank=32" in p.fix and "fits" in p.fix and "offload: actor.fsdp_config.param_offload=true" in p.fix
    assert memory_problems(config, get_registry(), available=200 * GB) == []  # room enough: no refusal
    assert memory_problems(load_config(None, [*SEVEN_B, "model.lora_rank=32"]), get_registry(), available=80 * GB) == []  # LoRA has its own refusal
    assert memory_problems(load_config(None, [*SEVEN_B, "trainer.device=cpu"]), get_registry(), available=80 * GB) == []
