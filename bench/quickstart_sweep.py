"""Run variants of a config side by side (several seeds each) and tabulate validation accuracy.

Used to choose the quickstart's hyper-parameters: every variant runs with
several trainer seeds, in parallel processes (on one GPU they share it), and
the table gives each variant's mean greedy validation accuracy per step and
the step time measured in that run.

    python bench/quickstart_sweep.py --out /tmp/sweep --parallel 8 --seeds 0 1 2 \
        --common "trainer.device=cuda model.path=/models/smollm2" \
        --variant "base:" --variant "lr3e-5:actor.optim.lr=3e-5"
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path


def parse_variant(text: str) -> tuple[str, list[str]]:
    name, _, overrides = text.partition(":")
    if not name:
        raise SystemExit(f"--variant {text!r}: expected NAME:key=value ...")
    return name, shlex.split(overrides)


def read_metrics(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def summarise(runs: dict[str, dict[int, Path]]) -> str:
    lines = []
    for name, by_seed in runs.items():
        curves: dict[int, list[float]] = {}
        step_times = []
        for seed, run_dir in sorted(by_seed.items()):
            rows = read_metrics(run_dir)
            step_times += [r["timing_s/step"] for r in rows if "timing_s/step" in r]
            for r in rows:
                if "val/accuracy" in r:
                    curves.setdefault(int(r["step"]), []).append(r["val/accuracy"])
        if not curves:
            lines.append(f"{name}: no validation rows (see its log)")
            continue
        med = statistics.median(step_times) if step_times else float("nan")
        cells = " ".join(f"{s}:{statistics.mean(v):.2f}[{'/'.join(f'{x:.2f}' for x in v)}]" for s, v in sorted(curves.items()))
        lines.append(f"{name} (median step {med:.2f}s): {cells}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="examples/quickstart.yaml")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--common", default="", help="overrides applied to every run")
    ap.add_argument("--variant", action="append", required=True, help="NAME:key=value ... (repeatable)")
    args = ap.parse_args(argv)

    common = shlex.split(args.common)
    jobs, runs = [], {}
    for text in args.variant:
        name, overrides = parse_variant(text)
        for seed in args.seeds:
            run_dir = args.out / f"{name}-s{seed}"
            runs.setdefault(name, {})[seed] = run_dir
            cmd = [sys.executable, "-m", "rl_core", "train", args.config, *common, *overrides,
                   f"trainer.seed={seed}", f"trainer.output_dir={run_dir}", "trainer.save_freq=-1", "--no-progress"]
            jobs.append((run_dir, cmd))

    args.out.mkdir(parents=True, exist_ok=True)
    running: list[tuple[Path, subprocess.Popen, object]] = []
    start = time.time()
    try:
        while jobs or running:
            while jobs and len(running) < args.parallel:
                run_dir, cmd = jobs.pop(0)
                log = open(args.out / f"{run_dir.name}.log", "w")
                running.append((run_dir, subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT), log))
            time.sleep(2)
            for item in list(running):
                run_dir, proc, log = item
                if proc.poll() is not None:
                    log.close()
                    running.remove(item)
                    print(f"[{time.time() - start:6.0f}s] {run_dir.name} exited {proc.returncode}", flush=True)
    except KeyboardInterrupt:  # timeout -s INT: stop the runs, tabulate what they logged
        print(f"[{time.time() - start:6.0f}s] interrupted: stopping {len(running)} runs, {len(jobs)} not started", flush=True)
        for _, proc, _ in running:
            proc.terminate()
        for _, proc, log in running:
            proc.wait()
            log.close()
    table = summarise(runs)
    (args.out / "summary.txt").write_text(table + "\n")
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
