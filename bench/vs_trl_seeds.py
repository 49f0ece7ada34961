"""Every seed of the same-settings comparison pooled (issue 18): is rl-core's early lag behind TRL real?

Reads the run JSONs ``bench/vs_trl_cpu.py`` wrote (``trl-sN.json`` and ``rlcore-same-sN.json``) from the folders
given, pairs the two frameworks by seed (same training prompts in the same order) and prints, per evaluation step,
both means, the mean paired difference, its standard error from the seed-to-seed spread of the differences, and the
binomial band the issue names (two standard errors of a difference of two means of 100-item accuracies, from the
pooled accuracy). Only seeds run by both frameworks count.

    python bench/vs_trl_seeds.py bench/results/vs_trl_cpu/runs bench/results/vs_trl_cpu/supplementary_seed3 \\
        bench/results/vs_trl_cpu/early_seeds/runs > bench/results/vs_trl_cpu/all_seeds.md
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

ITEMS = 100  # held-out items per evaluation


def load(folders: list[Path]) -> dict[str, dict[int, dict[int, float]]]:
    """{name: {seed: {step: accuracy}}} for the trl and rlcore-same runs found in ``folders``."""
    runs: dict[str, dict[int, dict[int, float]]] = {"trl": {}, "rlcore-same": {}}
    for folder in folders:
        for path in sorted(folder.glob("*.json")):
            data = json.loads(path.read_text())
            if data.get("name") in runs:
                # rl-core logs float32 accuracies (0.10000000149): counts of 100 items, so round to them
                runs[data["name"]][int(data["seed"])] = {int(e["step"]): round(float(e["accuracy"]) * ITEMS) / ITEMS for e in data["evals"]}
    return runs


def table(runs: dict[str, dict[int, dict[int, float]]]) -> str:
    seeds = sorted(set(runs["trl"]) & set(runs["rlcore-same"]))
    steps = sorted(set.intersection(*(set(runs[n][s]) for n in runs for s in seeds)))
    lines = [
        f"Seeds run by both: {seeds} ({len(seeds)} pairs).", "",
        "| step | TRL mean | rl-core mean | rl-core - TRL | SE (seed spread) | diff / SE | binomial band (2 SE, n seeds) | rl-core ahead |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for step in steps:
        a = [runs["trl"][s][step] for s in seeds]
        b = [runs["rlcore-same"][s][step] for s in seeds]
        d = [y - x for x, y in zip(a, b)]
        mean_d = statistics.fmean(d)
        se = statistics.stdev(d) / math.sqrt(len(d)) if len(d) > 1 else float("nan")
        p = (statistics.fmean(a) + statistics.fmean(b)) / 2
        band = 2 * math.sqrt(2 * p * (1 - p) / (ITEMS * len(seeds)))
        ratio = mean_d / se if se > 0 else float("nan")
        ahead = sum(y > x for x, y in zip(a, b))
        ties = sum(y == x for x, y in zip(a, b))
        lines.append(
            f"| {step} | {statistics.fmean(a):.3f} | {statistics.fmean(b):.3f} | {mean_d:+.3f} | {se:.3f} | {ratio:+.2f} | {band:.3f} "
            f"| {ahead} of {len(seeds)}{f' ({ties} tied)' if ties else ''} |"
        )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    print(table(load([Path(a) for a in argv])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
