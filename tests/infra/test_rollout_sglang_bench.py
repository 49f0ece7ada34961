"""bench/rollout_gpu.py's rounds (which the SGLang part uses), bench/rollout_sglang_part.py's counts and bench/rollout_sglang.sh's part stage.

No engine: fake runs for the rounds; a data-only stream of ~1 KB parts for the shell stage (under a scratch DEV_TMP)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def part():
    return _load("rollout_sglang_part")


@pytest.fixture(scope="module")
def rg():
    return _load("rollout_gpu")


def test_rounds_alternate_the_order_reset_before_every_call_and_stop_at_the_deadline(rg):
    calls, resets = [], []

    def run(label, tokens):
        def go():
            calls.append(label)
            return tokens, {"prefilled": tokens * 10}
        return go

    runs = [("a", run("a", 3)), ("b", run("b", 5))]
    samples = rg.run_rounds(runs, 4, lambda: resets.append(len(calls)), lambda: True)
    assert calls == ["a", "b", "b", "a", "a", "b", "b", "a"]  # ABBA: no run always first
    assert resets == list(range(8))  # before each call, none after
    assert [s["tokens"] for s in samples["a"]] == [3] * 4 and samples["b"][0]["prefilled"] == 50
    assert all(s["seconds"] >= 0 for s in samples["a"] + samples["b"])

    left = iter([True, True, True, False, False, False])
    cut = rg.run_rounds(runs, 3, lambda: None, lambda: next(left))
    assert [len(cut["a"]), len(cut["b"])] == [1, 2]  # round 1: a, b; round 2: b, then the deadline


def test_rows_take_the_median_seconds_and_keep_every_sample(rg):
    samples = {"x": [dict(tokens=100, seconds=s, gc_s=0.0, prefilled=p) for s, p in ((3.0, 30), (1.0, 10), (2.0, 20))], "never ran": []}
    rows = rg.rows_from_rounds(samples, "long", floor=0.5, nominal_tokens=200, prompt_tokens=64)
    assert len(rows) == 1  # a run without samples has no row
    row = rows[0]
    assert row["name"] == "x" and row["workload"] == "long" and row["seconds"] == 2.0
    assert row["prefilled"] == 20 and row["prompt_tokens"] == 64  # the median sample's extras
    assert row["tokens_per_s"] == 50.0 and row["pct_floor"] == pytest.approx(100 * 0.5 / 2.0 * 100 / 200)
    assert row["samples_s"] == [3.0, 1.0, 2.0]


def test_prefilled_counts_prompt_minus_cached_tokens(part):
    assert part._prefilled([{"prompt_tokens": 160, "cached_tokens": 159}, {"prompt_tokens": 160, "cached_tokens": 0}]) == 161
    assert part._prefilled([{"prompt_tokens": 12}]) == 12
    assert part._prefilled([{"cached_tokens": 3}]) is None and part._prefilled([]) is None


def test_flush_asks_again_until_sglang_flushes(part):
    class Result:
        def __init__(self, success):
            self.success = success

    answers = iter([Result(False), Result(False), Result(True)])

    class Engine:
        asked = 0

        def flush_cache(self):
            Engine.asked += 1
            return next(answers)

    part._flush(Engine())
    assert Engine.asked == 3

    class Never:
        def flush_cache(self):
            return Result(False)

    with pytest.raises(RuntimeError, match="flush_cache failed 2 times"):
        part._flush(Never(), tries=2)


def test_the_part_stage_installs_the_stream_once_all_its_parts_were_carried(tmp_path):
    """bench/rollout_sglang.sh part: each call's .gpu/sgl/dvNN goes to $DEV_TMP/parts/sgl; the segment installs when complete."""
    src = tmp_path / "src"
    (src / "m").mkdir(parents=True)
    payload = os.urandom(3000)
    (src / "m" / "blob.bin").write_bytes(payload)
    listing = tmp_path / "list.txt"
    listing.write_text("extra data m/blob.bin\n")  # a data-only segment: no pip here (and not "sglang": no probe)
    out = tmp_path / "gpu" / "sgl"
    built = subprocess.run([sys.executable, str(BENCH / "device_bundle.py"), "build", "--list", str(listing), "--gpu-dir", str(src),
                            "--out", str(out), "--part-mib", "0.001"], capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stdout + built.stderr
    folders = sorted(out.glob("dv[0-9][0-9]"))
    assert len(folders) >= 3
    carried = tmp_path / "carried"
    carried.mkdir()
    env = {**os.environ, "DEV_TMP": str(tmp_path / "dev_tmp"), "OUT": str(tmp_path / "out"), "SGL_PARTS": str(carried)}

    def call(k: int) -> subprocess.CompletedProcess:  # one device call carrying folders[k] (earlier ones stay, as there)
        (carried / folders[k].name).symlink_to(folders[k], target_is_directory=True)
        return subprocess.run(["bash", str(BENCH / "rollout_sglang.sh"), "part"], env=env, capture_output=True, text=True, timeout=120)

    first = call(0)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "segment extra: waits for part" in first.stdout and "carry dv01 next" in first.stdout
    for k in range(1, len(folders)):
        last = call(k)
        assert last.returncode == 0, last.stdout + last.stderr
    assert "segment extra: installed" in last.stdout
    assert (tmp_path / "dev_tmp" / "dev" / "data" / "m" / "blob.bin").read_bytes() == payload
    index = json.loads((tmp_path / "dev_tmp" / "parts" / "sgl" / "INDEX.json").read_text())
    assert [s["name"] for s in index["segments"]] == ["extra"]
