"""Issue 46: the CPU quickstart's metrics before (50aadb2) and after the kernel's regrouping are bit-identical at the
same seed: every logged value but wall-clock ones (timing_s/*, perf/*, time) compared with ==.

    python bench/results/kernel_quickstart_cpu/compare.py   # prints the differences (none) and the keys compared
"""

import json
import sys
from pathlib import Path

HERE = Path(__file__).parent


def rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (HERE / name).read_text().splitlines() if line.strip()]


def clock(key: str) -> bool:
    return key == "time" or key.startswith(("timing_s/", "perf/"))


before, after = rows("before_50aadb2.metrics.jsonl"), rows("after.metrics.jsonl")
assert [r["step"] for r in before] == [r["step"] for r in after], "different steps"
diffs = [(a["step"], k, a.get(k), b.get(k)) for a, b in zip(before, after) for k in sorted(set(a) | set(b)) if not clock(k) and a.get(k) != b.get(k)]
print(f"{len(before)} rows; keys compared per row: {[sum(not clock(k) for k in r) for r in before]}; differences: {len(diffs)}")
for d in diffs:
    print("  step %s %s: %r != %r" % d)
sys.exit(1 if diffs else 0)
