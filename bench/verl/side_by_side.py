"""Side-by-side step table of verl and rl-core runs, from their own metric logs.

    python bench/verl/side_by_side.py --run "verl 0.9.1=verl:OUT/verl_reference.jsonl" \
        --run "rl-core hf=rlcore:OUT/grpo_hf.metrics.jsonl" [--skip 1] [--out table.md]

KIND ``verl``: verl's file logger (``trainer.logger=[...,file]``, VERL_FILE_LOGGER_PATH), one
``{"step": n, "data": {...}}`` a line; KIND ``verlcon``: verl's console log (``step:N - key:value - ...`` lines,
for a run whose file log is missing). KIND ``rlcore``: rl-core's metrics.jsonl, one flat object a line. Both
name their per-stage wall times ``timing_s/<stage>``. The table gives medians over the steps after the first
``--skip`` (warm-up: compilation, CUDA graph capture), each run's step against the first run's, then every step.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys

# stages in the order a step runs them; verl's update_weights and rl-core's sync_weights are the same stage
STAGES = ["gen", "reward", "old_log_prob", "ref", "adv", "update_actor", "update_weights", "sync_weights", "step"]
THROUGHPUT = {"verl": "perf/throughput", "verlcon": "perf/throughput", "rlcore": "perf/throughput_tokens_per_s"}
_CONSOLE_STEP = re.compile(r"step:(\d+) - (.*)$")


def _console_record(line: str) -> dict | None:
    """One metrics dict from a verl console line (``step:3 - timing_s/gen:1.2 - ...``), else None."""
    m = _CONSOLE_STEP.search(line.strip())
    if not m:
        return None
    rec: dict = {"step": int(m.group(1))}
    for item in m.group(2).split(" - "):
        key, sep, value = item.rpartition(":")
        if not sep:
            continue
        try:
            rec[key] = float(value)
        except ValueError:
            pass
    return rec


def load(kind: str, path: str) -> list[dict]:
    rows = []
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            if kind == "verlcon":
                rec = _console_record(line)
                if rec and "timing_s/step" in rec:
                    rows.append(rec)
                continue
            rec = json.loads(line)
            if kind == "verl":
                rec = {"step": rec.get("step"), **rec.get("data", {})}
            if "timing_s/step" in rec:
                rows.append(rec)
    if not rows:
        raise SystemExit(f"{path}: no line with timing_s/step (is it a {kind} log?)")
    return rows


def median(rows: list[dict], key: str):
    vals = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
    return statistics.median(vals) if vals else None


def fmt(v, spec=".2f") -> str:
    return "-" if v is None else format(v, spec)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", action="append", required=True, help="LABEL=KIND:PATH, KIND verl, verlcon or rlcore")
    ap.add_argument("--skip", type=int, default=1, help="warm-up steps left out of the medians (default 1)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    runs = []
    for spec in args.run:
        label, _, rest = spec.partition("=")
        kind, _, path = rest.partition(":")
        if kind not in THROUGHPUT or not path:
            raise SystemExit(f"--run {spec!r}: expected LABEL=KIND:PATH, KIND one of {sorted(THROUGHPUT)}")
        try:
            runs.append((label, kind, load(kind, path)))
        except FileNotFoundError:
            print(f"[side_by_side] {label}: {path} missing, left out", file=sys.stderr)
    if not runs:
        raise SystemExit("no run to compare")
    stages = [s for s in STAGES if any(f"timing_s/{s}" in r for _, _, rows in runs for r in rows)]
    lines = [
        f"Medians over steps after the first {args.skip} (seconds); ratio = this run's step / the first run's.",
        "",
        "| run | steps | " + " | ".join(stages) + " | tokens/s | resp len | peak GiB | step ratio |",
        "|---|---:|" + "---:|" * (len(stages) + 4),
    ]
    base = None
    for label, kind, rows in runs:
        timed = rows[args.skip:] or rows
        step = median(timed, "timing_s/step")
        base = base if base is not None else step
        cells = [fmt(median(timed, f"timing_s/{s}")) for s in stages]
        cells += [fmt(median(timed, THROUGHPUT[kind]), ".0f"), fmt(median(timed, "response_length/mean"), ".0f"),
                  fmt(median(timed, "perf/max_memory_allocated_gb"), ".1f"), fmt(step / base if step and base else None)]
        lines.append(f"| {label} | {len(timed)} | " + " | ".join(cells) + " |")
    for label, kind, rows in runs:
        lines += ["", f"{label}, every step:", "", "| step | " + " | ".join(stages) + " |", "|---:|" + "---:|" * len(stages)]
        for r in rows:
            lines.append(f"| {r.get('step')} | " + " | ".join(fmt(r.get(f"timing_s/{s}")) for s in stages) + " |")
    text = "\n".join(lines) + "\n"
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    print(text, end="")


if __name__ == "__main__":
    main()
