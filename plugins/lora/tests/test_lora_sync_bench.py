"""bench/lora_sync.py still runs with LoRA in rl-lora (its --tiny smoke, on CPU): both sync modes to the hf rollout,
each verified, the in-place merge borrowing the trainer's frozen bases through the plan's features
(rl_lora.merge via the rollout_adapters hook), and the two rollouts agreeing to the rollout dtype's rounding."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytest.importorskip("peft")
pytest.importorskip("rl_train_fsdp.engine", reason="the bench trains with the fsdp backend (pip install -e plugins/train_fsdp)")
BENCH = Path(__file__).resolve().parents[3] / "bench" / "lora_sync.py"


@pytest.mark.usefixtures("one_thread")
def test_lora_sync_bench_tiny_smoke(tmp_path):
    spec = importlib.util.spec_from_file_location("lora_sync_bench", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.main(["--tiny", "--out", str(tmp_path / "out"), "--work", str(tmp_path / "work")]) in (0, None)
    got = json.loads((tmp_path / "out" / "results.json").read_text())
    assert got["syncs"] == 2 and len(got["sync_s"]["merged"]) == 2 and len(got["sync_s"]["adapter"]) == 2
    # every base the in-place merge keeps is the trainer's own frozen tensor (no copy)
    assert got["bases_copied"] == 0 and got["bases_borrowed_from_trainer"] > 0
    # bf16: the in-place merge rounds the adapters to the rollout dtype before the GEMM, as the trainer's forward does
    assert got["max_rel_diff_between_rollouts"] < 2 ** -6
    assert (tmp_path / "out" / "README.md").read_text().startswith("# LoRA sync to the colocated hf rollout")
