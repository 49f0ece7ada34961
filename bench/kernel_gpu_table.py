"""The table of bench/kernel_gpu.sh: per kernel (before / after the regrouping), the median step time over the steady
steps of every round (from step 3: step 1 compiles, step 2 still warms up), and the stages; the ratio after / before."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def steps(path: Path) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in rows if r.get("step", 0) >= 3 and "timing_s/step" in r]


def main(out: str) -> None:
    kernels = {}
    for name in ("before", "after"):
        rows = [r for p in sorted(Path(out).glob(f"{name}_*.metrics.jsonl")) for r in steps(p)]
        if rows:
            kernels[name] = {k: statistics.median(r[k] for r in rows if k in r) for k in rows[0] if k.startswith("timing_s/")}
            kernels[name]["n"] = len(rows)
    print("| kernel | steps | step s | gen s | update_actor s |")
    print("|---|---:|---:|---:|---:|")
    for name, t in kernels.items():
        print(f"| {name} | {t['n']} | {t.get('timing_s/step', 0):.3f} | {t.get('timing_s/gen', 0):.3f} | {t.get('timing_s/update_actor', 0):.3f} |")
    if len(kernels) == 2:
        print(f"\nafter / before, median step: {kernels['after']['timing_s/step'] / kernels['before']['timing_s/step']:.3f}")


if __name__ == "__main__":
    main(sys.argv[1])
