"""GRPO through ``rlcore train`` with ``train.name=megatron``, TP 2 on 2 CPU processes.

With the ``hf`` rollout (always) and with every other rollout plugin whose engine is importable here
(vllm, sglang: their venvs run this file), weights synced from the TP shards into each rank's engine:
each step's rollout log-probs equal the Megatron actor's (``rollout_corr/log_prob_abs_diff_max``).
Kill -9 after a checkpoint and rerun: the resumed run logs the same metrics as an uninterrupted one.
"""

from __future__ import annotations

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
from rl_core_testing.bounded_run import communicate_bounded
from rl_core_testing.fp16_run import engine_missing
from rl_core_testing.tiny_run import write_tiny_run

pytest.importorskip("megatron.core", reason="needs megatron-core (pip install megatron-core==0.16.1)")

pytestmark = [pytest.mark.megatron, pytest.mark.slow, pytest.mark.dist]

NON_TIMING = lambda row: {k: v for k, v in row.items() if not k.startswith(("timing_s/", "perf/"))}  # noqa: E731


_engine_importable = engine_missing  # None when the rollout engine can run here, else why not


def write_run(tmp: Path, rollout: str, *, steps: int, save_freq: int = -1) -> Path:
    return write_tiny_run(
        tmp,
        nprocs=2,
        steps=steps,
        # head size 64 (vLLM's CPU kernels), 2 KV heads (TP 2), untied llama: the LM head is sharded too
        model=dict(arch="llama", hidden=128, layers=2, heads=2, kv_heads=2),
        # calculate_log_probs: the loop logs |rollout log-prob - actor log-prob| (rollout_corr/*): the sync check
        rollout__name=rollout,
        rollout__calculate_log_probs=True,
        train__name="megatron",
        train__tensor_model_parallel_size=2,
        trainer__save_freq=save_freq,
        trainer__val_before_train=False,
    )


def _train(cfg: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.Popen(
        [sys.executable, "-m", "rl_core", "train", str(cfg), "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )


def _run_to_end(cfg: Path) -> str:
    proc = _train(cfg)
    out = communicate_bounded(proc, timeout=600)  # a hang fails with every process's stack, not a bare timeout
    assert proc.returncode == 0, out[-6000:]
    return out


def _metrics(tmp: Path) -> list[dict]:
    return [json.loads(line) for line in (tmp / "out" / "metrics.jsonl").read_text().splitlines() if line.strip()]


def _check_trained(tmp: Path, steps: int) -> list[dict]:
    rows = _metrics(tmp)
    assert [r["step"] for r in rows] == list(range(1, steps + 1)), rows
    for row in rows:
        skipped = row.get("critic/advantages_all_zero") == 1.0  # Megatron now skips all-zero-advantage updates (#28)
        keys = ("reward/mean", "timing_s/gen", "timing_s/sync_weights") + (() if skipped else ("actor/pg_loss", "actor/grad_norm"))
        for key in keys:
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


def test_two_step_grpo_megatron_fully_sharded_dp2(tmp_path):
    """train.options.fully_shard (verl's megatron.use_megatron_fsdp) on 2 ranks (DP 2), the reference model too (KL loss): the
    rollout's log-probs equal the actor's after each sync of the all-gathered shards; hf_final holds trained weights."""
    cfg = write_tiny_run(tmp_path, nprocs=2, steps=2, model=dict(arch="llama", hidden=128, layers=2, heads=2, kv_heads=2),
                         rollout__calculate_log_probs=True, train__name="megatron", train__options__fully_shard=True,
                         actor__use_kl_loss=True, trainer__save_freq=2, trainer__val_before_train=False)
    _run_to_end(cfg)
    rows = _check_trained(tmp_path, 2)
    assert any("actor/kl_loss" in r for r in rows)
    layout = json.loads((tmp_path / "out" / "checkpoints" / "global_step_2" / "actor" / "megatron.json").read_text())
    assert layout["fully_shard"] is True and layout["dp"] == 2
