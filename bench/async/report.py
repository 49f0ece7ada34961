"""report.md (+ curves.png) from bench/async/run.py's output folder: step time against max(generation, update) and
their sum, per staleness, and the held-out accuracy against training time.

    python bench/async/report.py bench/async/results

update = the train pool's part of a step: timing_s/step minus waiting for the batch (timing_s/gen), for the
overlapped generation (timing_s/gen_overlap_wait) and the transfer (timing_s/sync_weights); generation =
timing_s/gen_rollout, measured inside the rollout process. Step 1 (warm-up) is left out of the means.
"""

from __future__ import annotations

import glob
import json
import os
import re
import statistics
import sys


def rows(path: str) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def main(out: str) -> None:
    runs = {}
    for path in sorted(glob.glob(os.path.join(out, "seed*_staleness*", "metrics.jsonl"))):
        seed, s = map(int, re.search(r"seed(\d+)_staleness(\d+)", path).groups())
        runs[(seed, s)] = rows(path)
    lines = ["# Async RL on the CPU quickstart: staleness 0 vs 1 (issue #34)", "",
             "1 rollout process + 1 train process (`rollout.n_gpus_per_node=1`), examples/quickstart.yaml with "
             "rollout log-probs + token TIS in both runs; `python bench/async/run.py` (its docstring has the command).",
             "Times are means over steps 2.. (step 1 warms up). update = the train pool's part of a step; generation "
             "= measured inside the rollout process (with an overlapped sync, `async.overlap_sync`, its receive of the weights "
             "too); sync = the train pool's part of the transfer (the gloo broadcast + its check; overlapped: the copy).", "",
             "| seed | staleness | steps | step s | generation s | update s | sync s | max(gen, update) s | gen + update s | step / max | step / sum |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    curves = {}
    for (seed, s), rs in sorted(runs.items()):
        train = [r for r in rs if "timing_s/step" in r]
        later = [r for r in train if r["step"] >= 2] or train
        if not later:
            continue
        mean = lambda key: statistics.mean(r.get(key, 0.0) for r in later)  # noqa: E731
        # an overlapped sync (async.overlap_sync): the rollout side receives before it generates: counted as its work
        step, sync = mean("timing_s/step"), mean("timing_s/sync_weights")
        gen = mean("timing_s/gen_rollout") + mean("timing_s/sync_receive")
        update = step - mean("timing_s/gen") - mean("timing_s/gen_overlap_wait") - sync
        lines.append(f"| {seed} | {s} | {len(train)} | {step:.1f} | {gen:.1f} | {update:.1f} | {sync:.1f} | {max(gen, update):.1f} | "
                     f"{gen + update:.1f} | {step / max(gen, update):.2f} | {step / (gen + update):.2f} |")
        elapsed, curve = 0.0, []
        for r in rs:
            elapsed += r.get("timing_s/step", 0.0)
            if "val/accuracy" in r:
                curve.append((r["step"], elapsed, r["val/accuracy"]))
        curves[(seed, s)] = curve
    lines += ["", "Held-out greedy accuracy (100 problems) against training time (the sum of timing_s/step; validation "
              "not counted). Step 0 is measured once per seed (the same initial weights) and shown for both.", "",
              "| seed | staleness | step: accuracy (training time so far) | first >= 0.5 |", "|---|---|---|---|"]
    for (seed, s), curve in sorted(curves.items()):
        start = [c for c in curves.get((seed, 1 - s), []) if c[0] == 0] if not any(c[0] == 0 for c in curve) else []
        curve = start + curve
        curves[(seed, s)] = curve
        hit = next((f"step {st}, {t:.0f} s" for st, t, a in curve if a >= 0.5), "not reached")
        lines.append(f"| {seed} | {s} | " + ", ".join(f"{st}: {a:.2f} ({t:.0f} s)" for st, t, a in curve) + f" | {hit} |")
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    for (seed, s), curve in sorted(curves.items()):
        ax.plot([t / 60 for _, t, _ in curve], [a for _, _, a in curve], marker="o", label=f"staleness {s}, seed {seed}")
    ax.set_xlabel("training time (min)")
    ax.set_ylabel("held-out accuracy")
    ax.axhline(0.5, color="gray", lw=0.5)
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out, "curves.png"), dpi=100)


if __name__ == "__main__":
    main(sys.argv[1])
