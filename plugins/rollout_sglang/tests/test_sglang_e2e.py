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
from rl_core.testing.tiny_run import write_tiny_run

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
        rollout__calculate_log_probs=True,
        trainer__test_freq=steps,
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
        for key in ("reward/mean", "actor/pg_loss", "actor/grad_norm", "timing_s/gen", "timing_s/sync_weights", "response_length/mean"):
            assert key in row and math.isfinite(row[key]), (key, sorted(row))
        # SGLang sampled with the weights synced from the FSDP actor (at start, then after step 1's update): its
        # log-probs of its own tokens equal the actor's (the loop logs |rollout - actor| with calculate_log_probs)
        assert row["rollout_corr/log_prob_abs_diff_max"] < 1e-3, (row["step"], row["rollout_corr/log_prob_abs_diff_max"])
    assert any("val/reward_mean" in r for r in rows), "validation (greedy SGLang generation) did not run"
    from safetensors.torch import load_file

    before = load_file(str(tmp_path / "model" / "model.safetensors"))
    after = load_file(str(tmp_path / "out" / "hf_final" / "model.safetensors"))
    assert any(not torch.equal(before[k], after[k]) for k in before if k in after), "no weight changed after two updates"


#: Why the SGLang CPU engine cannot take LoRA adapters (rollout.lora_sync=adapter), measured with sglang 0.5.23:
#: sglang.Engine(..., device="cpu", enable_lora=True, lora_backend="torch_native") dies at start-up in
#: sglang/srt/lora/layers.py (torch.tensor(..., pin_memory=True); 26 such calls in sglang/srt/lora).
SGLANG_CPU_LORA = ("SGLang 0.5.23's LoRA layers pin host memory, which a CPU-only torch cannot: the engine dies at start-up with "
                   "'RuntimeError: pin_memory=True requires a CUDA or other accelerator backend; no pinned memory allocator is "
                   "available on this system' (sglang/srt/lora/layers.py)")


def test_lora_adapter_sync_on_the_sglang_cpu_engine():
    """Not on this engine (SGLANG_CPU_LORA): the card declares no adapter API, so rollout.lora_sync=auto is merged
    for SGLang and rlcore check refuses rollout.lora_sync=adapter with it (rl_core.lora_checks.lora_sync_problems)."""
    from rl_rollout_sglang.plugin import SGLANG_ROLLOUT

    assert not SGLANG_ROLLOUT.lora_adapters
    pytest.skip(SGLANG_CPU_LORA)
