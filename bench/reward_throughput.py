"""Reward scoring throughput: the reward manager in-process vs with its process pool.

    python bench/reward_throughput.py                       # gsm8k, 4096 samples
    python bench/reward_throughput.py --reward math --batch 512
    python bench/reward_throughput.py --out bench/results/reward_throughput.md

Responses are GSM8K reference solutions (../shared/data/gsm8k/train.jsonl),
half of them with the final number changed, so scorers see real text and both
outcomes; for ``--reward math`` the final number is written as \\boxed{...}.
Every timed batch holds different responses (consecutive slices of the file,
wrapping around), so caches inside the scorers (sympy's) do not flatter the
in-process numbers the way a repeated batch would.
Needs rl-reward-rule installed (pip install -e plugins/reward_rule).
Reports samples/s over ``--repeats`` timed batches after one warm-up batch
(pool start-up and scorer imports are reported separately, not in the rate).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GSM8K = REPO.parent / "shared" / "data" / "gsm8k" / "train.jsonl"


def load_records() -> list[dict]:
    if not GSM8K.is_file():
        sys.exit(f"needs {GSM8K} (the shared GSM8K copy)")
    return [json.loads(line) for line in GSM8K.read_text().splitlines() if line.strip()]


def make_batch(records: list[dict], n: int, reward: str, offset: int = 0):
    """``n`` responses from ``records[offset:]`` (wrapping), half right, half with a wrong final number."""
    from rl_core.batch import Batch

    texts, truths = [], []
    for i in range(n):
        rec = records[(offset + i) % len(records)]
        head, final = rec["answer"].rsplit("####", 1)
        truth = final.strip().replace(",", "")
        shown = truth if (offset + i) % 2 == 0 else str(int(truth) + 1)
        texts.append(f"{head}#### {shown}" if reward == "gsm8k" else f"{head}The answer is \\boxed{{{shown}}}.")
        truths.append(truth)
    source = "openai/gsm8k" if reward == "gsm8k" else "lighteval/MATH"
    return Batch(non_tensors={"response_text": texts, "data_source": [source] * n, "ground_truth": truths})


def measure(batches: list, num_workers: int) -> dict:
    """Score ``batches[0]`` as a warm-up, then time each of the others."""
    from rl_core.config.schema import RewardConfig
    from rl_core.plugins import get_registry
    from rl_core.rewards.manager import RewardManager

    cfg = RewardConfig(num_workers=num_workers, timeout_s=30.0)
    with RewardManager(cfg, get_registry()) as manager:
        t0 = time.perf_counter()
        manager.score(batches[0])  # warm-up: pool start, scorer imports
        warmup = time.perf_counter() - t0
        times, means = [], []
        for batch in batches[1:]:
            t0 = time.perf_counter()
            scores, metrics, _ = manager.score(batch)
            times.append(time.perf_counter() - t0)
            means.append(float(scores.mean()))
            assert metrics["reward/timeouts"] == 0 and metrics["reward/errors"] == 0
    med = statistics.median(times)
    n = len(batches[1])
    return {"workers": num_workers, "warmup_s": warmup, "median_s": med, "rate": n / med, "mean_score": statistics.mean(means)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reward", default="gsm8k", choices=["gsm8k", "math"])
    p.add_argument("--batch", type=int, default=4096)
    p.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", default=None, help="also write the markdown table here")
    args = p.parse_args()

    load_before = os.getloadavg()[0]
    records = load_records()
    batches = [make_batch(records, args.batch, args.reward, k * args.batch) for k in range(args.repeats + 1)]
    rows = [measure(batches, w) for w in args.workers]
    base = next((r["rate"] for r in rows if r["workers"] == 0), None)
    lines = [
        f"### {args.reward}: batches of {args.batch} samples, median of {args.repeats} distinct batches",
        "",
        f"machine: {platform.machine()}, {os.cpu_count()} CPU cores, Python {platform.python_version()}; "
        f"1-min load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after (other processes share the cores)",
        "",
        "| reward.num_workers | samples/s | batch time (s) | vs in-process | first batch incl. start-up (s) | mean score |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        rel = f"{r['rate'] / base:.2f}x" if base else "-"
        mode = "0 (in-process)" if r["workers"] == 0 else str(r["workers"])
        lines.append(
            f"| {mode} | {r['rate']:,.0f} | {r['median_s']:.3f} | {rel} | {r['warmup_s']:.2f} | {r['mean_score']:.3f} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        with open(args.out, "a") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
