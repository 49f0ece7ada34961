"""The report of bench/vs_trl_cpu.py: merges OUT/runs/*.json into OUT/README.md, OUT/summary.json and PNG curves.

Noise: each evaluation scores 100 held-out items, so one run's accuracy p has a binomial standard error of
sqrt(p (1 - p) / 100) (0.05 at p = 0.5); the mean of k seeds, sqrt(p (1 - p) / (100 k)). Two frameworks'
means differ "within noise" when the gap is under 1.96 standard errors of the difference,
1.96 sqrt(pa (1 - pa) / (100 ka) + pb (1 - pb) / (100 kb)) (about 0.08 for k = 3 at p = 0.5). This counts the
sampling of items only; seeds add run-to-run spread on top (the per-seed columns show it).
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

TARGET = 0.50
ITEMS = 100
LABELS = {"trl": "TRL GRPOTrainer (reference settings)", "rlcore-same": "rl-core, the same settings",
          "rlcore-quickstart": "rl-core, examples/quickstart.yaml defaults",
          "rlcore-quickstart-mb4": "rl-core, quickstart with 2 optimizer steps per rollout (previous default)"}
COLORS = {"trl": "tab:orange", "rlcore-same": "tab:blue", "rlcore-quickstart": "tab:green", "rlcore-quickstart-mb4": "tab:olive"}
QUICKSTARTS = ("rlcore-quickstart", "rlcore-quickstart-mb4")


def load_runs(out: Path) -> dict[str, dict[int, dict]]:
    runs: dict[str, dict[int, dict]] = {}
    for path in sorted((out / "runs").glob("*.json")):
        data = json.loads(path.read_text())
        runs.setdefault(data["name"], {})[int(data["seed"])] = data
    return runs


def first_reach(evals: list[dict], target: float = TARGET) -> dict | None:
    """The first evaluation after step 0 at or above ``target``."""
    return next((e for e in evals if e["step"] > 0 and e["accuracy"] >= target), None)


def by_step(seeds: dict[int, dict]) -> dict[int, dict[int, dict]]:
    """step -> seed -> eval row."""
    out: dict[int, dict[int, dict]] = {}
    for seed, run in seeds.items():
        for e in run["evals"]:
            out.setdefault(int(e["step"]), {})[seed] = e
    return out


def noise(p_a: float, k_a: int, p_b: float, k_b: int) -> float:
    """1.96 standard errors of the difference of two means of binomial accuracies on ITEMS items."""
    return 1.96 * math.sqrt(p_a * (1 - p_a) / (ITEMS * k_a) + p_b * (1 - p_b) / (ITEMS * k_b))


def _fmt_seeds(rows: dict[int, dict], key: str = "accuracy", fmt: str = "{:.2f}") -> str:
    return "/".join(fmt.format(rows[s][key]) for s in sorted(rows))


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def time_to_target(seeds: dict[int, dict]) -> dict:
    """Per seed: (step, training s) of the first eval >= TARGET, or the run's last eval as a lower bound."""
    per_seed, censored = {}, []
    for seed, run in sorted(seeds.items()):
        hit = first_reach(run["evals"])
        if hit is None:
            last = run["evals"][-1]
            per_seed[seed] = {"reached": False, "step": last["step"], "train_s": last["train_s"]}
            censored.append(seed)
        else:
            per_seed[seed] = {"reached": True, "step": hit["step"], "train_s": hit["train_s"]}
    mean_s = statistics.mean(v["train_s"] for v in per_seed.values()) if per_seed else float("nan")
    return {"per_seed": per_seed, "mean_s": mean_s, "all_reached": not censored, "not_reached": censored}


def report(out: Path) -> dict:
    out = Path(out)
    runs = load_runs(out)
    summary: dict = {"target": TARGET, "items": ITEMS, "runs": {}}
    lines = ["# rl-core vs TRL GRPOTrainer on the CPU quickstart task", "",
             "Written by `python bench/vs_trl_cpu.py report` from `runs/*.json` (one file per framework and seed; "
             "`bench/vs_trl_cpu.py` says what each run is). Accuracy: greedy, on the same 100 held-out items; "
             "time: training only (sum of step times, evaluations excluded).", ""]
    for name in ("trl", "rlcore-same", *QUICKSTARTS):
        seeds = runs.get(name)
        if not seeds:
            continue
        steps = by_step(seeds)
        step_s = [t for run in seeds.values() for t in run["step_s"]]
        tt = time_to_target(seeds)
        summary["runs"][name] = {
            "seeds": sorted(seeds), "median_step_s": _median(step_s),
            "mean_accuracy": {s: statistics.mean(r["accuracy"] for r in rows.values()) for s, rows in sorted(steps.items())},
            "mean_train_s": {s: statistics.mean(r["train_s"] for r in rows.values()) for s, rows in sorted(steps.items())},
            "time_to_target": tt,
        }
        lines += [f"## {LABELS[name]}", "", f"Seeds {sorted(seeds)}; median step {_median(step_s):.2f} s "
                  f"({len(step_s)} steps); command of seed {min(seeds)}:", "", "```", seeds[min(seeds)]["command"], "```", ""]
        if seeds[min(seeds)].get("note"):
            lines += [f"Note: {seeds[min(seeds)]['note']}.", ""]
        if any(run.get("stopped_at_target") for run in seeds.values()):
            lines += ["These runs ended at their first evaluation >= 0.50 (`--stop-at-target`): later rows average the seeds still running.", ""]
        lines += ["| step | mean accuracy | per seed | mean training time |", "|---:|---:|---|---:|"]
        for s, rows in sorted(steps.items()):
            mean_acc = statistics.mean(r["accuracy"] for r in rows.values())
            mean_t = statistics.mean(r["train_s"] for r in rows.values())
            some = "" if len(rows) == len(seeds) else f" ({len(rows)} of {len(seeds)} seeds)"
            lines.append(f"| {s} | {mean_acc:.3f}{some} | {_fmt_seeds(rows)} | {mean_t:.0f} s ({mean_t / 60:.1f} min) |")
        reach = ", ".join(
            f"seed {s}: {'' if v['reached'] else 'not by '}step {v['step']}, {v['train_s']:.0f} s" for s, v in tt["per_seed"].items()
        )
        bound = "" if tt["all_reached"] else " (a lower bound: not every seed reached it)"
        lines += ["", f"First evaluation >= {TARGET:.2f}: {reach}; mean {tt['mean_s']:.0f} s ({tt['mean_s'] / 60:.1f} min){bound}.", ""]

    verdicts = []
    if "trl" in runs and "rlcore-same" in runs:
        a, b = by_step(runs["rlcore-same"]), by_step(runs["trl"])
        rows_out, ok_all = [], True
        lines += ["## Same settings: rl-core vs TRL per evaluation step", "",
                  "Band: 1.96 binomial standard errors of the difference of the two means (100 items, the seeds of each side).", "",
                  "| step | TRL mean | rl-core mean | rl-core - TRL | band | rl-core >= TRL - band |", "|---:|---:|---:|---:|---:|---|"]
        for s in sorted(set(a) & set(b)):
            pa = statistics.mean(r["accuracy"] for r in a[s].values())
            pb = statistics.mean(r["accuracy"] for r in b[s].values())
            band = noise(pa, len(a[s]), pb, len(b[s]))
            ok = pa >= pb - band
            ok_all &= ok
            rows_out.append({"step": s, "trl": pb, "rlcore": pa, "band": band, "ok": ok})
            lines.append(f"| {s} | {pb:.3f} | {pa:.3f} | {pa - pb:+.3f} | {band:.3f} | {'yes' if ok else 'NO'} |")
        summary["same_settings"] = {"per_step": rows_out, "holds": ok_all}
        verdicts.append(f"- Same settings, rl-core's mean accuracy >= TRL's at every common evaluation step within the band: **{'holds' if ok_all else 'does not hold'}**.")
        lines.append("")
    for q in QUICKSTARTS:
        if "trl" not in runs or q not in runs:
            continue
        tq = summary["runs"][q]["time_to_target"]
        tt = summary["runs"]["trl"]["time_to_target"]
        ratio = tq["mean_s"] / tt["mean_s"] if tt["mean_s"] else float("nan")
        # TRL's mean is a lower bound when a seed did not reach the target: the true ratio is then at most this one
        holds = tq["all_reached"] and ratio <= 1 / 3
        summary.setdefault("quickstart_vs_trl", {})[q] = {"ratio": ratio, "holds": holds, "trl_lower_bound": not tt["all_reached"]}
        note = "" if tt["all_reached"] else " (TRL's mean is a lower bound, so the true ratio is at most this)"
        verdicts.append(
            f"- Time to {TARGET:.2f}, {LABELS[q]} vs TRL: {tq['mean_s']:.0f} s vs {tt['mean_s']:.0f} s, ratio {ratio:.2f}{note}; "
            f"at most 1/3: **{'holds' if holds else 'does not hold'}**."
        )
    if verdicts:
        lines += ["## Acceptance", ""] + verdicts + [""]
    lines += ["Curves: `accuracy_vs_step.png`, `accuracy_vs_time.png`.", ""]
    if (out / "notes.md").exists():  # the hand-written reading of these numbers
        lines += [(out / "notes.md").read_text()]
    (out / "README.md").write_text("\n".join(lines))
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    plot(runs, out)
    print("\n".join(lines))
    return summary


def plot(runs: dict[str, dict[int, dict]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for xkey, fname, xlabel in (("step", "accuracy_vs_step.png", "training step"),
                                ("train_s", "accuracy_vs_time.png", "training time (min, evaluations excluded)")):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for name, seeds in runs.items():
            steps = by_step(seeds)
            color = COLORS.get(name)
            for seed, run in sorted(seeds.items()):
                xs = [e[xkey] / (60 if xkey == "train_s" else 1) for e in run["evals"]]
                ax.plot(xs, [e["accuracy"] for e in run["evals"]], color=color, alpha=0.25, lw=1)
            full = [s for s, rows in sorted(steps.items()) if len(rows) == len(seeds)]
            xs = [statistics.mean(r[xkey] for r in steps[s].values()) / (60 if xkey == "train_s" else 1) for s in full]
            ys = [statistics.mean(r["accuracy"] for r in steps[s].values()) for s in full]
            ax.plot(xs, ys, color=color, lw=2.2, marker="o", ms=3, label=f"{LABELS.get(name, name)} (mean of {len(seeds)})")
            if xkey == "step":
                band = [1.96 * math.sqrt(y * (1 - y) / (ITEMS * len(seeds))) for y in ys]
                ax.fill_between(xs, [y - b for y, b in zip(ys, band)], [y + b for y, b in zip(ys, band)], color=color, alpha=0.12)
        ax.axhline(TARGET, color="grey", ls="--", lw=1)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("greedy accuracy, 100 held-out items")
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
        ax.set_title("SmolLM2-135M-Instruct, basic_arithmetic, 2-core CPU" + (" (band: binomial 95%)" if xkey == "step" else ""), fontsize=9)
        fig.tight_layout()
        fig.savefig(out / fname, dpi=110)
        plt.close(fig)
