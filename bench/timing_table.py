"""Per-stage timing table (markdown) from a run's metrics.jsonl.

    python bench/timing_table.py RUN_DIR/metrics.jsonl
"""

from __future__ import annotations

import json
import sys

STAGES = ["gen", "reward", "old_log_prob", "ref", "values", "adv", "update_critic", "update_actor", "sync_weights", "step"]


def _fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def main(path: str) -> None:
    rows = [json.loads(line) for line in open(path) if line.strip()]
    rows = [r for r in rows if "timing_s/step" in r]
    stages = [s for s in STAGES if any(f"timing_s/{s}" in r for r in rows)]
    print("| step | " + " | ".join(f"{s} (s)" for s in stages) + " | tokens/s | response len | peak mem (GiB) |")
    print("|---:|" + "---:|" * (len(stages) + 3))
    for r in rows:
        cells = [_fmt(r.get(f"timing_s/{s}"), ".2f") for s in stages]
        cells += [_fmt(r.get("perf/throughput_tokens_per_s"), ".0f"), _fmt(r.get("response_length/mean"), ".0f"), _fmt(r.get("perf/max_memory_allocated_gb"), ".1f")]
        print(f"| {r['step']} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1])
