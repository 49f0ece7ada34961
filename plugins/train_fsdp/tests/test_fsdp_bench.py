"""bench/fsdp_gpu.py runs end to end on CPU with --tiny (the GPU run uses the same code)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def test_bench_tiny_runs_and_writes_the_table(tmp_path):
    out = tmp_path / "bench.md"
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "fsdp_gpu.py"), "--tiny", "--out", str(out)],
        capture_output=True, text=True, timeout=300, env=env, cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = out.read_text()
    for stage in ("rollout generate", "ref log-probs", "actor log-probs", "actor update", "weight sync"):
        assert f"| {stage}" in text, text
    assert "| stage | seconds | tokens/s | peak memory (GiB) |" in text
    assert text.strip() in proc.stdout
