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
import yaml

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

REWARD = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """Fraction of characters that are digits: random tiny models get a spread of rewards."""
    if not solution_str:
        return 0.0
    return sum(c.isdigit() for c in solution_str) / len(solution_str)
'''


def write_run(tmp: Path, *, steps: int = 2) -> Path:
    from rl_core.testing.tiny_model import make_tiny_model_dir

    model = make_tiny_model_dir(tmp / "model", "qwen2", hidden=64, layers=2, heads=4, kv_heads=2)  # tied embeddings
    rows = [
        {
            "data_source": "tiny/digits",
            "prompt": [{"role": "user", "content": f"{i % 7}+{(3 * i) % 5}="}],
            "reward_model": {"style": "rule", "ground_truth": str(i % 7 + (3 * i) % 5)},
            "extra_info": {"index": i},
        }
        for i in range(16)
    ]
    data = tmp / "train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp / "reward.py").write_text(REWARD)
    cfg = {
        "model": {"path": str(model)},
        "data": {"train_files": [str(data)], "val_files": [str(data)], "train_batch_size": 4, "max_prompt_length": 32, "max_response_length": 8, "val_max_samples": 4},
        "rollout": {"name": "sglang", "n": 2, "temperature": 1.0, "calculate_log_probs": True},
        "train": {"name": "fsdp"},
        "actor": {"ppo_mini_batch_size": 2, "ppo_micro_batch_size_per_gpu": 2, "optim": {"lr": 1e-3}},
        "algorithm": {"adv_estimator": "grpo"},
        "reward": {"custom": {"path": str(tmp / "reward.py"), "name": "compute_score"}},
        "trainer": {
            "device": "cpu", "n_gpus_per_node": 1, "total_training_steps": steps, "output_dir": str(tmp / "out"),
            "loggers": ["jsonl"], "test_freq": steps, "val_before_train": True, "save_freq": -1, "seed": 7,
        },
    }
    path = tmp / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


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

