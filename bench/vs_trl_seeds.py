"""Every seed of the same-settings comparison pooled (issue 18): is rl-core's early lag behind TRL real?

Reads the run JSONs ``bench/vs_trl_cpu.py`` wrote (``trl-sN.json`` and ``rlcore-same-sN.json``) from the folders
given, pairs the two frameworks by seed (same training prompts in the same order) and prints, per evaluation step,
both means, the mean paired difference, its standard error from the seed-to-seed spread of the differences, and the
binomial band the issue names (two standard errors of a difference of two means of 100-item accuracies, from the
pooled accuracy). Only seeds run by both frameworks count.

    python bench/vs_trl_seeds.py bench/results/vs_trl_cpu/runs bench/results/vs_trl_cpu/supplementary_seed3 \\
        bench/results/vs_trl_cpu/early_seeds/runs > bench/results/vs_trl_cpu/all_seeds.md

``--triples`` adds the issue's own test applied to every disjoint triple of seeds (in seed order): does rl-core's
3-seed mean stay at or above TRL's minus the 3-seed binomial band at every step? And, for scale, the same test with
the roles swapped (TRL measured against rl-core): where the two frameworks learn alike, both pass about equally
often, and how often either fails says how much a 3-seed comparison can tell. ``--plot PNG`` draws both means
with 95% intervals of the seed spread, and the paired difference.
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


def paired(runs: dict[str, dict[int, dict[int, float]]]) -> tuple[list[int], list[int]]:
    """(seeds run by both frameworks, evaluation steps every one of those runs has)."""
    seeds = sorted(set(runs["trl"]) & set(runs["rlcore-same"]))
    steps = sorted(set.intersection(*(set(runs[n][s]) for n in runs for s in seeds)))
    return seeds, steps


def table(runs: dict[str, dict[int, dict[int, float]]]) -> str:
    seeds, steps = paired(runs)
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


def band3(p: float, k: int = 3) -> float:
    """The issue's noise: two standard errors of a difference of two k-seed means of 100-item accuracies."""
    return 2 * math.sqrt(2 * p * (1 - p) / (ITEMS * k))


def triples(runs: dict[str, dict[int, dict[int, float]]]) -> str:
    """The 3-seed test on each disjoint triple of paired seeds, both ways round (see the module docstring)."""
    seeds, steps = paired(runs)
    steps = [k for k in steps if k != 0]
    groups = [seeds[i : i + 3] for i in range(0, len(seeds) - 2, 3)]

    def holds(cand: str, ref: str, group: list[int]) -> list[int]:
        """Steps where cand's mean is below ref's by more than the band (empty: the test holds)."""
        failed = []
        for step in steps:
            a = statistics.fmean(runs[ref][s][step] for s in group)
            b = statistics.fmean(runs[cand][s][step] for s in group)
            if b < a - band3((a + b) / 2):
                failed.append(step)
        return failed

    lines = [
        f"The 3-seed test (mean at every step {steps} at least the other's minus the 3-seed binomial band) on "
        f"{len(groups)} disjoint triples of seeds:", "",
        "| seeds | rl-core vs TRL | TRL vs rl-core |", "|---|---|---|",
    ]
    passed = {"rlcore-same": 0, "trl": 0}
    for g in groups:
        cells = []
        for cand, ref in (("rlcore-same", "trl"), ("trl", "rlcore-same")):
            failed = holds(cand, ref, g)
            passed[cand] += not failed
            cells.append("holds" if not failed else "fails at step " + ", ".join(map(str, failed)))
        lines.append(f"| {', '.join(map(str, g))} | {cells[0]} | {cells[1]} |")
    lines += ["", f"Holds for rl-core against TRL in {passed['rlcore-same']} of {len(groups)} triples; "
              f"for TRL against rl-core in {passed['trl']} of {len(groups)}."]
    return "\n".join(lines)


def plot(runs: dict[str, dict[int, dict[int, float]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    seeds, steps = paired(runs)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6.5), sharex=True, gridspec_kw={"height_ratios": [2, 1]})
    for name, label, color in (("trl", "TRL 1.16 GRPOTrainer", "tab:orange"), ("rlcore-same", "rl-core, TRL's settings", "tab:blue")):
        means = [statistics.fmean(runs[name][s][k] for s in seeds) for k in steps]
        half = [1.96 * statistics.stdev([runs[name][s][k] for s in seeds]) / math.sqrt(len(seeds)) for k in steps]
        top.errorbar(steps, means, yerr=half, color=color, marker="o", ms=3, capsize=3, label=f"{label} (mean of {len(seeds)} seeds)")
    top.set_ylabel("greedy accuracy, 100 held-out items")
    top.set_ylim(0, 0.6)
    top.grid(alpha=0.3)
    top.legend(fontsize=8, loc="lower right")
    diffs = [[runs["rlcore-same"][s][k] - runs["trl"][s][k] for s in seeds] for k in steps]
    mean_d = [statistics.fmean(d) for d in diffs]
    half_d = [1.96 * statistics.stdev(d) / math.sqrt(len(d)) if any(d) else 0.0 for d in diffs]
    bottom.errorbar(steps, mean_d, yerr=half_d, color="black", marker="o", ms=3, capsize=3, label="rl-core - TRL, paired by seed (95%)")
    bottom.axhline(0, color="grey", lw=1)
    bottom.set_xlabel("training step")
    bottom.set_ylabel("difference")
    bottom.grid(alpha=0.3)
    bottom.legend(fontsize=8, loc="lower right")
    top.set_title("SmolLM2-135M-Instruct, basic_arithmetic, 2 prompts x 8 samples, same settings", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folders", nargs="+", type=Path, help="folders of run JSONs")
    ap.add_argument("--triples", action="store_true", help="the 3-seed test on each disjoint triple of seeds, both ways round")
    ap.add_argument("--plot", type=Path, help="PNG: both means and the paired difference per step")
    args = ap.parse_args(argv)
    runs = load(args.folders)
    print(table(runs))
    if args.triples:
        print()
        print(triples(runs))
    if args.plot:
        plot(runs, args.plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
