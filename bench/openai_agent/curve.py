"""The learning curve of an examples/openai_agent.yaml run, from its metrics.jsonl, as a Markdown table.

    python bench/openai_agent/curve.py OUTPUT_DIR/metrics.jsonl [> curve.md]

Per validation: the step, held-out accuracy (greedy; the reward's correct answers: score >= 1), the mean
validation reward, and the programs' end states; then per training step the reward, the programs' failures and
the step's timings. The no-training baseline is the validation before training (step 0).
"""

from __future__ import annotations

import json
import sys


def main(path: str) -> None:
    rows = [json.loads(line) for line in open(path, encoding="utf-8") if line.strip()]
    vals = [m for m in rows if "val/accuracy" in m]
    print("| step | held-out accuracy | val reward mean | programs ok / all |")
    print("|---|---|---|---|")
    for m in vals:
        ok, total = m.get("val/agent/stop/ok", 0.0), m.get("val/agent/trajectories", 0.0)
        print(f"| {int(m['step'])} | {m['val/accuracy']:.3f} | {m.get('val/reward_mean', float('nan')):.3f} | {ok:.0f} / {total:.0f} |")
    if vals:
        base, best = vals[0]["val/accuracy"], max(m["val/accuracy"] for m in vals[1:]) if len(vals) > 1 else None
        if best is not None:
            print(f"\nbaseline (step {int(vals[0]['step'])}, no training): {base:.3f}; best after training: {best:.3f} "
                  f"({best - base:+.3f}; the acceptance bar is +0.2)")
    train = [m for m in rows if "reward/mean" in m or "critic/score/mean" in m]
    if train:
        print("\n| step | reward mean | programs failed | calls / trajectory | gen s | step s |")
        print("|---|---|---|---|---|---|")
        for m in train:
            total = m.get("agent/trajectories", 0.0) or 1.0
            failed = total - m.get("agent/stop/ok", 0.0)
            reward = m.get("reward/mean", m.get("critic/score/mean", float("nan")))
            print(f"| {int(m['step'])} | {reward:.3f} | {failed:.0f} | {m.get('agent/turns', 0.0) / total:.2f} | "
                  f"{m.get('timing_s/gen', float('nan')):.1f} | {m.get('timing_s/step', float('nan')):.1f} |")


if __name__ == "__main__":
    main(sys.argv[1])
