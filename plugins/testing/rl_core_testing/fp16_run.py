"""A 2-step GRPO ``rlcore train`` run with ``model.dtype=float16``, for the train / rollout plugins' tests.

:func:`fp16_grpo_run` writes the tiny run (:mod:`rl_core_testing.tiny_run`) with float16 set, checks it with
``rlcore check``, trains it, and asserts what float16 must show in every step's metrics: the loss scale
(``actor/loss_scale``, :mod:`rl_core.train_engine.loss_scale`) at its start with no skipped step, a finite
gradient norm, the rollout's log-probs close to the actor's (``rollout_corr/log_prob_abs_diff_max``), and every
weight changed by the end. Returns the metrics rows.
"""

from __future__ import annotations

import importlib
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from rl_core_testing.bounded_run import communicate_bounded
from rl_core_testing.tiny_run import read_metrics, write_tiny_run


def engine_missing(rollout: str) -> str | None:
    """None when the rollout plugin and its engine import here, else why not (a skip's reason)."""
    if rollout == "hf":
        return None
    try:
        importlib.import_module(f"rl_rollout_{rollout}")
        importlib.import_module(rollout)
    except Exception as exc:  # noqa: BLE001
        return f"needs the {rollout} engine and rl-rollout-{rollout} (run in that engine's venv): {type(exc).__name__}: {exc}"
    return None


def _rlcore(command: str, cfg: Path, timeout: float) -> str:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    args = [sys.executable, "-m", "rl_core", command, str(cfg)] + (["--no-progress"] if command == "train" else [])
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    out = communicate_bounded(proc, timeout=timeout)
    assert proc.returncode == 0, f"rlcore {command} failed:\n{out[-6000:]}"
    return out


def fp16_grpo_run(tmp: Path, *, nprocs: int, rollout: str = "hf", sync_atol: float = 0.05, **extra: Any) -> list[dict[str, Any]]:
    """Train 2 GRPO steps in float16; ``extra``: more config keys (``train__name="megatron"``)."""
    tmp = Path(tmp)
    cfg = write_tiny_run(tmp, nprocs=nprocs, steps=2, model__dtype="float16", rollout__name=rollout, rollout__calculate_log_probs=True,
                         trainer__val_before_train=False, **extra)
    _rlcore("check", cfg, 300)
    out = _rlcore("train", cfg, 600)
    assert "float16 compute, float32 weights and optimizer" in out, out[-3000:]
    if rollout == "vllm":  # the engine's own config line: vLLM was told float16 and kept it
        assert "dtype=torch.float16" in out, out[-3000:]
    rows = read_metrics(tmp / "out")
    assert [r["step"] for r in rows] == [1, 2], rows
    for row in rows:
        assert row["actor/loss_scale"] == 2.0**16 and row["actor/loss_scale_skipped_steps"] == 0, row
        assert math.isfinite(row["actor/grad_norm"]) and math.isfinite(row["actor/loss"]), row
        assert row["rollout_corr/log_prob_abs_diff_max"] < sync_atol, row["rollout_corr/log_prob_abs_diff_max"]
    from safetensors.torch import load_file

    before, after = load_file(str(tmp / "model" / "model.safetensors")), load_file(str(tmp / "out" / "hf_final" / "model.safetensors"))
    assert set(after) == set(before) and all(v.dtype == before[k].dtype for k, v in after.items())
    changed = [k for k in before if not (before[k] == after[k]).all()]
    assert len(changed) > len(before) // 2, f"only {changed} changed"
    return rows
