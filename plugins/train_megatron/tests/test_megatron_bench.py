"""bench/megatron_gpu.py runs end to end on CPU with SMOKE=1 (TP 2 on 2 processes; the GPU run uses the same code)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("megatron.core", reason="needs megatron-core (pip install megatron-core==0.16.1)")

REPO = Path(__file__).resolve().parents[3]
pytestmark = [pytest.mark.megatron, pytest.mark.dist]


def test_bench_smoke_runs_three_steps_and_writes_the_table(tmp_path):
    out = tmp_path / "bench.md"
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "megatron_gpu.py"), "--out", str(out)],
        capture_output=True, text=True, timeout=600, env={**env, "SMOKE": "1"}, cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = out.read_text()
    assert "| step | generate s | update s | weight sync s | step s | update MFU |" in text
    rows = [line for line in text.splitlines() if line.startswith(("| 1 |", "| 2 |", "| 3 |"))]
    assert len(rows) == 3, text
    assert "TP 2" in text and text.strip() in proc.stdout
