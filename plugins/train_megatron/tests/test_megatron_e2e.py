"""GRPO through ``rlcore train`` with ``train.name=megatron``, TP 2 on 2 CPU processes.

With the ``hf`` rollout (always) and with every other rollout plugin whose engine is importable here
(vllm, sglang: their venvs run this file), weights synced from the TP shards into each rank's engine:
each step's rollout log-probs equal the Megatron actor's (``rollout_corr/log_prob_abs_diff_max``).
Kill -9 after a checkpoint and rerun: the resumed run logs the same metrics as an uninterrupted one.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

pytest.importorskip("megatron.core", reason="needs megatron-core (pip install megatron-core==0.16.1)")

pytestmark = [pytest.mark.megatron, pytest.mark.slow, pytest.mark.dist]

REWARD = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """Fraction of characters that are digits: random tiny models get a spread of rewards."""
    if not solution_str:
        return 0.0
    return sum(c.isdigit() for c in solution_str) / len(solution_str)
'''
NON_TIMING = lambda row: {k: v for k, v in row.items() if not k.startswith(("timing_s/", "perf/"))}  # noqa: E731


def _engine_importable(rollout: str) -> str | None:
    """None when the rollout engine can run here, else why not."""
    if rollout == "hf":
        return None
    try:
        importlib.import_module(f"rl_rollout_{rollout}")
        importlib.import_module(rollout)
    except Exception as exc:  # noqa: BLE001
        return f"needs the {rollout} engine and rl-rollout-{rollout} (run in that engine's venv): {type(exc).__name__}: {exc}"
    return None


def write_run(tmp: Path, rollout: str, *, steps: int, save_freq: int = -1) -> Path:
    from rl_core.testing.tiny_model import make_tiny_model_dir

    # head size 64 (vLLM's CPU kernels), 2 KV heads (TP 2), untied llama: the LM head is sharded too
    model = make_tiny_model_dir(tmp / "model", "llama", hidden=128, layers=2, heads=2, kv_heads=2)
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
        "data": {"train_files": [str(data)], "train_batch_size": 4, "max_prompt_length": 32, "max_response_length": 8},
        # calculate_log_probs: the loop logs |rollout log-prob - actor log-prob| (rollout_corr/*): the sync check
        "rollout": {"name": rollout, "n": 2, "temperature": 1.0, "calculate_log_probs": True},
        "train": {"name": "megatron", "tensor_model_parallel_size": 2},
        "actor": {"ppo_mini_batch_size": 2, "ppo_micro_batch_size_per_gpu": 2, "optim": {"lr": 1e-3}},
        "algorithm": {"adv_estimator": "grpo"},
        "reward": {"custom": {"path": str(tmp / "reward.py"), "name": "compute_score"}},
        "trainer": {
            "device": "cpu", "n_gpus_per_node": 2, "total_training_steps": steps, "output_dir": str(tmp / "out"),
            "loggers": ["jsonl"], "test_freq": -1, "save_freq": save_freq, "seed": 7,
        },
    }
    path = tmp / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _train(cfg: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.Popen(
        [sys.executable, "-m", "rl_core", "train", str(cfg), "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )


def _run_to_end(cfg: Path) -> str:
    proc = _train(cfg)
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-6000:]
    return out


def _metrics(tmp: Path) -> list[dict]:
    return [json.loads(line) for line in (tmp / "out" / "metrics.jsonl").read_text().splitlines() if line.strip()]


def _check_trained(tmp: Path, steps: int) -> list[dict]:
    rows = _metrics(tmp)
    assert [r["step"] for r in rows] == list(range(1, steps + 1)), rows
    for row in rows:
        for key in ("reward/mean", "actor/pg_loss", "actor/grad_norm", "timing_s/gen", "timing_s/sync_weights"):
            assert key in row and math.isfinite(row[key]), (key, row.get(key))
        # the rollout engine sampled with the weights gathered from the TP shards (at start, then after each update):
        # its log-probs of its own tokens equal the Megatron actor's
        assert row["rollout_corr/log_prob_abs_diff_max"] < 1e-3, row["rollout_corr/log_prob_abs_diff_max"]
    from safetensors.torch import load_file

    before, after = load_file(str(tmp / "model" / "model.safetensors")), load_file(str(tmp / "out" / "hf_final" / "model.safetensors"))
    assert set(after) == set(before)
    assert all(not torch.equal(before[k], after[k]) for k in before if not k.endswith("norm.weight")), "an update missed some weights"
    return rows


@pytest.mark.parametrize("rollout", ["vllm", "sglang"])
def test_two_step_grpo_megatron_tp2_with_other_rollouts(tmp_path, rollout):
    why = _engine_importable(rollout)
    if why:
        pytest.skip(why)
    _run_to_end(write_run(tmp_path, rollout, steps=2))
    _check_trained(tmp_path, 2)


def test_grpo_megatron_tp2_hf_kill_and_resume_matches_uninterrupted(tmp_path):
    steps = 3
    _run_to_end(write_run(tmp_path / "ref", "hf", steps=steps, save_freq=2))
    reference = _check_trained(tmp_path / "ref", steps)
    assert (tmp_path / "ref" / "out" / "checkpoints" / "global_step_2" / "actor" / "megatron.json").is_file()

    cfg = write_run(tmp_path / "killed", "hf", steps=steps, save_freq=2)
    ckpt = tmp_path / "killed" / "out" / "checkpoints" / "global_step_2"
    proc = _train(cfg)
    deadline = time.time() + 400
    while not ckpt.exists():
        assert proc.poll() is None, proc.stdout.read()
        assert time.time() < deadline, "no checkpoint within 400 s"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    out = _run_to_end(cfg)
    assert "resumed from" in out and "(step 2)" in out, out[-3000:]
    resumed = _metrics(tmp_path / "killed")
    assert [r["step"] for r in resumed] == list(range(1, steps + 1))
    for a, b in zip(reference[2:], resumed[2:]):
        a, b = NON_TIMING(a), NON_TIMING(b)
        assert a.keys() == b.keys()
        for k in a:
            assert a[k] == pytest.approx(b[k], rel=1e-6, abs=1e-7), k
