"""The table of bench/results/distill_cpu: validation accuracy per step of each run, and the first step each run
reaches the target (the teacher's held-out accuracy minus 0.05).

    python bench/distill_cpu_table.py RESULTS_DIR --teacher-acc 0.45 --step0 0.11

RESULTS_DIR holds ``<run>.metrics.jsonl`` (copied from each run's output folder); runs are grouped by the name before
``-s<seed>``: ``grpo-s0``, ``grpo-s1``, ``distill-s0``, ...
"""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict
from pathlib import Path


def curve(path: Path) -> dict[int, float]:
    out = {}
    for line in path.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            if "val/accuracy" in row:
                out[int(row["step"])] = float(row["val/accuracy"])
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results")
    ap.add_argument("--teacher-acc", type=float, required=True)
    ap.add_argument("--step0", type=float, default=None, help="the student's accuracy before training (the same for every run)")
    args = ap.parse_args(argv)
    target = round(args.teacher_acc - 0.05, 4)
    runs = {p.name.removesuffix(".metrics.jsonl"): curve(p) for p in sorted(Path(args.results).glob("*.metrics.jsonl"))}
    runs = {k: ({0: args.step0, **v} if args.step0 is not None and 0 not in v else v) for k, v in runs.items() if v}
    steps = sorted({s for c in runs.values() for s in c})
    print(f"target: teacher's held-out accuracy {args.teacher_acc:.2f} - 0.05 = {target:.2f}\n")
    print("| step | " + " | ".join(runs) + " |")
    print("|---:|" + "---:|" * len(runs))
    for s in steps:
        print(f"| {s} | " + " | ".join(f"{c[s]:.2f}" if s in c else "" for c in runs.values()) + " |")
    print("\nfirst validated step at or above the target (steps are optimizer steps: one per rollout):\n")
    groups = defaultdict(list)
    for name, c in runs.items():
        hit = next((s for s in sorted(c) if c[s] >= target - 1e-9), None)
        last = max(c)
        groups[re.sub(r"-s\d+$", "", name)].append(hit)
        print(f"- {name}: " + (f"step {hit}" if hit is not None else f"not by step {last} (best {max(c.values()):.2f})"))
    print()
    for g, hits in groups.items():
        got = [h for h in hits if h is not None]
        print(f"- {g}: {len(got)} of {len(hits)} seeds reached it" + (f", mean step {sum(got) / len(got):.1f} over those" if got else ""))


if __name__ == "__main__":
    main()
