"""Two runs' metrics side by side, step by step (e.g. chunked vs plain log-probs on the same seed).

    python bench/compare_metrics.py A.metrics.jsonl B.metrics.jsonl [--names A B] [--out compare.md]

Every metric both runs logged, except timings, throughput and memory, with the largest relative difference
over the steps; the rows are sorted by it. Runs with the same seed sample the same responses as long as their
weights agree, so the differences are the two code paths' numerics.
"""

from __future__ import annotations

import argparse
import json

SKIP = ("timing_s/", "perf/", "throughput", "training/")


def rows(path: str) -> dict[int, dict]:
    out = {}
    for line in open(path):
        if line.strip():
            r = json.loads(line)
            if "step" in r:
                out[int(r["step"])] = r
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--names", nargs=2, default=["A", "B"])
    ap.add_argument("--out")
    args = ap.parse_args()
    a, b = rows(args.a), rows(args.b)
    steps = sorted(set(a) & set(b))
    keys = sorted({k for s in steps for k in a[s] if k in b[s] and k != "step" and not k.startswith(SKIP)
                   and isinstance(a[s][k], (int, float)) and isinstance(b[s][k], (int, float))})
    table = []
    for k in keys:
        pairs = [(a[s][k], b[s][k]) for s in steps if k in a[s] and k in b[s]]
        rel = max((abs(x - y) / max(abs(x), abs(y), 1e-12) for x, y in pairs), default=0.0)
        table.append((rel, k, pairs))
    table.sort(key=lambda r: -r[0])
    n1, n2 = args.names
    lines = [f"# {n1} vs {n2}: steps {steps}", "", f"`{args.a}` vs `{args.b}`", "",
             f"| metric | largest relative difference | per step ({n1} / {n2}) |", "|---|---:|---|"]
    for rel, k, pairs in table:
        lines.append(f"| {k} | {rel:.2e} | " + "; ".join(f"{x:.6g} / {y:.6g}" for x, y in pairs) + " |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        open(args.out, "w").write(text)


if __name__ == "__main__":
    main()
