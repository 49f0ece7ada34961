"""Data-parallel scaling of a GRPO job from its runs' metrics.jsonl files (1 GPU first).

Issue 54's successor runs the runs too: bench/scaling/run.py (one device command per GPU count, the scale workload,
shares of the step, peak vs estimate per rank; ``--table`` merges its calls). This one reads any runs' metrics.

    python bench/scaling_table.py dp1/metrics.jsonl dp2/metrics.jsonl [dp2_strong/metrics.jsonl ...]

Per run: GPUs, median step time and median tokens/s per GPU over the steps after the first two (the first
ones include CUDA-graph capture and allocator warm-up), and the scaling efficiency against the first run:
tokens/s per GPU divided by the first run's tokens/s per GPU. With the same work per GPU (weak scaling)
this is the usual data-parallel efficiency; with the same global batch split over more GPUs (strong
scaling) it also charges the smaller per-GPU batch.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

WARMUP_STEPS = 2


def summarise(path: str) -> dict:
    rows = [json.loads(line) for line in open(path) if line.strip()]
    rows = [r for r in rows if "timing_s/step" in r]
    if not rows:
        raise SystemExit(f"{path}: no step rows (did the run fail? see its .log)")
    steady = rows[WARMUP_STEPS:] or rows
    world = round(steady[0]["perf/throughput_tokens_per_s"] / steady[0]["perf/throughput_tokens_per_s_per_device"])
    return {
        "run": Path(path).name.removesuffix(".metrics.jsonl").removeprefix("grpo_"),
        "gpus": world,
        "steps": len(rows),
        "step_s": statistics.median(r["timing_s/step"] for r in steady),
        "gen_s": statistics.median(r.get("timing_s/gen", 0.0) for r in steady),
        "update_s": statistics.median(r.get("timing_s/update_actor", 0.0) for r in steady),
        "tok_s_gpu": statistics.median(r["perf/throughput_tokens_per_s_per_device"] for r in steady),
    }


def main(paths: list[str]) -> None:
    runs = [summarise(p) for p in paths]
    base = runs[0]["tok_s_gpu"]
    print(f"Median over steps {WARMUP_STEPS + 1}.. of each run; efficiency = tokens/s per GPU over the first run's.\n")
    print("| run | GPUs | steps | step (s) | gen (s) | update (s) | tokens/s/GPU | efficiency |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in runs:
        print(
            f"| {r['run']} | {r['gpus']} | {r['steps']} | {r['step_s']:.2f} | {r['gen_s']:.2f} | {r['update_s']:.2f} "
            f"| {r['tok_s_gpu']:.0f} | {r['tok_s_gpu'] / base:.0%} |"
        )


if __name__ == "__main__":
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    main(sys.argv[1:])
