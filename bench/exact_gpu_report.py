"""The tables of bench/exact_gpu.sh (issue 51): per run and step the rollout-vs-trainer gap, the deterministic pair
compared byte for byte (metrics without timing columns, hf_final's tensors), and exact mode's step-time cost.

    python bench/exact_gpu_report.py OUT HF_FINAL_A HF_FINAL_B
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

GAP = ("rollout_corr/log_prob_abs_diff_max", "rollout_corr/log_prob_abs_diff_mean", "rollout_corr/kl", "rollout_corr/log_prob_gap_frac")
TIMES = ("timing_s/step", "timing_s/gen", "timing_s/update_actor")


def rows(out: Path, name: str) -> list[dict]:
    path = out / f"{name}.metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def comparable(r: dict) -> dict:
    """A row without its timing columns (the wall clock, seconds, throughput)."""
    return {k: v for k, v in r.items() if not (k == "time" or k.startswith(("timing_s/", "perf/")) or k.endswith("_s"))}


def weights_equal(a: Path, b: Path) -> str:
    from safetensors.torch import load_file

    fa, fb = sorted(a.glob("*.safetensors")), sorted(b.glob("*.safetensors"))
    if not fa or [f.name for f in fa] != [f.name for f in fb]:
        return f"missing or different files: {[f.name for f in fa]} vs {[f.name for f in fb]}"
    differ = []
    for x, y in zip(fa, fb):
        ta, tb = load_file(str(x)), load_file(str(y))
        if ta.keys() != tb.keys():
            return f"{x.name}: other tensor names"
        differ += [k for k in ta if not (ta[k].dtype == tb[k].dtype and ta[k].shape == tb[k].shape and ta[k].view(-1).view_as(ta[k]).equal(tb[k]))]
    return "identical (every tensor bit for bit)" if not differ else f"{len(differ)} tensors differ, e.g. {differ[:3]}"


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def main(out: str, final_a: str, final_b: str) -> None:
    out = Path(out)
    lines = ["# exact_gpu.sh", "", (out / "versions.txt").read_text().strip() if (out / "versions.txt").exists() else "", "",
             "## The gap, every step (rollout_corr/*)", "", "| run | step | max abs | mean abs | kl | share > threshold |", "|---|---:|---:|---:|---:|---:|"]
    for name in ("exact", "packed", "default", "det_a"):
        for r in rows(out, name):
            lines.append(f"| {name} | {r['step']} | " + " | ".join(f"{r.get(k, float('nan')):.3g}" for k in GAP) + " |")
    verdict = {name: (len(rows(out, name)) > 0 and all(r.get(GAP[0]) == 0.0 for r in rows(out, name))) for name in ("exact", "packed")}
    lines += ["", f"exact mode, 0 on every token of every step: padded {'MET' if verdict['exact'] else 'NOT MET'}, "
                  f"packed {'MET' if verdict['packed'] else 'NOT MET'}"]
    a, b = [comparable(r) for r in rows(out, "det_a")], [comparable(r) for r in rows(out, "det_b")]
    differ = sorted({k for ra, rb in zip(a, b) for k in set(ra) | set(rb) if ra.get(k) != rb.get(k)})
    same = bool(a) and len(a) == len(b) and not differ
    lines += ["", "## trainer.deterministic=true, same seed, two runs", "",
              f"- metrics.jsonl (timing columns out): {'identical' if same else f'DIFFER in {differ[:8]}'} ({len(a)} / {len(b)} rows)",
              f"- hf_final: {weights_equal(Path(final_a), Path(final_b)) if Path(final_a).exists() and Path(final_b).exists() else 'missing'}", "",
              "## exact mode's cost (medians over steps 2..; step 1 warms up)", "", "| run | " + " | ".join(TIMES) + " |", "|---|" + "---:|" * len(TIMES)]
    med = {}
    for name in ("default", "exact", "packed"):
        rs = rows(out, name)[1:] or rows(out, name)
        med[name] = {k: median([r[k] for r in rs if k in r]) for k in TIMES}
        lines.append(f"| {name} | " + " | ".join("-" if med[name][k] is None else f"{med[name][k]:.3f}" for k in TIMES) + " |")
    if med["default"]["timing_s/step"] and med["exact"]["timing_s/step"]:
        lines += ["", f"exact / default step time: {med['exact']['timing_s/step'] / med['default']['timing_s/step']:.2f}x"]
    print("\n".join(lines))


if __name__ == "__main__":
    main(*sys.argv[1:4])
