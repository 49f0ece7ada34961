"""A 2-step GRPO job with ``rollout.name=sglang`` and ``train.name=fsdp`` on CPU.

``rlcore train`` in a subprocess (the path users take; SGLang's processes are
spawned from it). With ``rollout.calculate_log_probs`` the loop logs how far
SGLang's log-probs of its own tokens are from the FSDP actor's
(``rollout_corr/log_prob_abs_diff_max``): step 2 samples after step 1's update
and weight sync, so this checks the sync end to end.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from rl_core_testing.tiny_run import write_tiny_run

try:
    import sglang  # noqa: F401
except Exception as exc:  # noqa: BLE001
    pytest.skip(
        "needs the SGLang engine (pip install 'rl-rollout-sglang[gpu]' on GPU; on CPU run "
        f"plugins/rollout_sglang/scripts/install_cpu_engine.sh in a separate venv): {type(exc).__name__}: {exc}",
        allow_module_level=True,
    )
pytest.importorskip("rl_train_fsdp", reason="needs the rl-train-fsdp plugin (pip install -e plugins/train_fsdp)")

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

def write_run(tmp: Path, *, steps: int = 2) -> Path:
    return write_tiny_run(
        tmp,
        steps=steps,
        model=dict(arch="qwen2", hidden=64, layers=2, heads=4, kv_heads=2),  # tied embeddings
        rollout__name="sglang",
        trainer__test_freq=steps,
        rollout__calculate_log_probs=True,  # the rollout_corr/* gap every step (the default, null, asks on steps 1, 11, ...)
        trainer__val_before_train=True,
    )


def test_two_step_grpo_sglang_fsdp(tmp_path):
    cfg = write_run(tmp_path)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    res = subprocess.run(
        [sys.executable, "-m", "rl_core", "train", "--no-progress", str(cfg)], capture_output=True, text=True, env=env, timeout=900
    )
    assert res.returncode == 0, f"rlcore train failed ({res.returncode}):\n{res.stdout[-3000:]}\n{res.stderr[-6000:]}"
    rows = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = [r for r in rows if r.get("step", 0) >= 1]
    assert [r["step"] for r in steps] == [1, 2], rows
    for row in steps:
        for key in ("reward/mean", "actor/pg_loss", "actor/grad_norm", "timing_s/gen", "timing_s/sync_weights", "response_length/mean",
                    "rollout_corr/log_prob_abs_diff_max", "rollout_corr/log_prob_abs_diff_mean", "rollout_corr/kl", "rollout_corr/log_prob_gap_frac"):
            assert key in row and math.isfinite(row[key]), (key, sorted(row))
        # SGLang sampled with the weights synced from the FSDP actor (at start, then after step 1's update): its
        # log-probs of its own tokens equal the actor's (the loop logs |rollout - actor| with calculate_log_probs)
        assert row["rollout_corr/log_prob_abs_diff_max"] < 1e-3, (row["step"], row["rollout_corr/log_prob_abs_diff_max"])
    assert any("val/reward_mean" in r for r in rows), "validation (greedy SGLang generation) did not run"
    from safetensors.torch import load_file

    before = load_file(str(tmp_path / "model" / "model.safetensors"))
    after = load_file(str(tmp_path / "out" / "hf_final" / "model.safetensors"))
    assert any(not torch.equal(before[k], after[k]) for k in before if k in after), "no weight changed after two updates"


def test_two_step_lora_grpo_with_adapter_only_sync_to_sglang(tmp_path):
    """LoRA on the fsdp actor, rollout.lora_sync=adapter: the frozen base goes to SGLang once, then after each update
    only the adapters, through SGLang's own LoRA API (load_lora_adapter_from_tensors; on CPU its torch_native LoRA
    backend, pinned memory off: rl_rollout_sglang.sglang_quirks). Every sync is verified by reading back what SGLang
    holds (base weights through its LoRA wrappers, the adapter as its LoRA manager keeps it), and SGLang's log-probs
    of its own samples equal the actor's at both steps, while the adapters move the policy well beyond that gap."""
    pytest.importorskip("peft", reason="LoRA needs peft (pip install rl-lora; peft==0.21.2 in the engine's venv)")
    cfg = write_tiny_run(
        tmp_path, steps=2, model=dict(arch="qwen2", hidden=64, layers=2, heads=4, kv_heads=2), rollout__name="sglang",
        rollout__calculate_log_probs=True, rollout__lora_sync="adapter", model__lora_rank=4, model__lora_alpha=8,
        actor__optim__lr=1e-2,
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    res = subprocess.run([sys.executable, "-m", "rl_core", "train", "--no-progress", str(cfg)], capture_output=True, text=True, env=env, timeout=900)
    out = res.stdout + res.stderr
    assert res.returncode == 0, f"rlcore train failed ({res.returncode}):\n{res.stdout[-3000:]}\n{res.stderr[-6000:]}"
    assert "not verified" not in out, out[-3000:]  # every sync was read back from SGLang's processes
    rows = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = [r for r in rows if r.get("step", 0) >= 1]
    assert [r["step"] for r in steps] == [1, 2], rows
    for row in steps:
        assert row["rollout_corr/log_prob_abs_diff_max"] < 1e-3, (row["step"], row["rollout_corr/log_prob_abs_diff_max"])
    # the adapters matter: the trained policy's log-probs differ from the base's by far more than that gap
    from transformers import AutoModelForCausalLM

    ids = torch.randint(0, 100, (2, 12), generator=torch.Generator().manual_seed(0))
    lps = []
    for folder in (tmp_path / "model", tmp_path / "out" / "hf_final"):
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
        with torch.no_grad():
            lps.append(torch.log_softmax(model(input_ids=ids).logits.float(), -1))
    assert (lps[0] - lps[1]).abs().max().item() > 1e-2
    assert (tmp_path / "out" / "hf_final" / "adapter_config.json").is_file()  # a PEFT adapter folder (transformers + peft load it above)
