"""Fixed-seed metrics of short runs, for comparing the update loop before and after a refactor (issue 28).

    python bench/engine_contract/capture.py OUT_DIR [CASE,...]  # writes OUT_DIR/<case>.jsonl (timings dropped)
    python bench/engine_contract/capture.py --compare A B  # exit 1 unless every case's rows are identical

Cases: the CPU quickstart (3 steps, no validation) and tiny-model runs through the fsdp engine that exercise
several mini-batches, ppo epochs, a token-budget (dynamic) batch, PPO with a critic and a KL reference.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

TINY = {
    "grpo_minibatches": {"actor__ppo_mini_batch_size": 1, "actor__ppo_micro_batch_size_per_gpu": 1},
    "grpo_epochs_dynamic": {"actor__ppo_epochs": 2, "actor__use_dynamic_bsz": True, "actor__ppo_max_token_len_per_gpu": 40},
    "ppo_critic_kl": {"estimator": "gae", "actor__use_kl_loss": True, "actor__ppo_mini_batch_size": 1},
}


def _clean(row: dict) -> dict:
    return {k: v for k, v in row.items() if not k.startswith(("timing", "perf", "time")) and "_s/" not in k
            and not k.endswith(("_s", "throughput", "tokens_per_s", "mem_gib"))}


def capture(out: Path, only: set[str] | None = None) -> None:
    from rl_core_testing.tiny_run import read_metrics
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        qs = Path(tmp) / "qs"
        if only is None or "quickstart" in only:
            subprocess.run([sys.executable, "-m", "rl_core.cli.main", "train", "examples/quickstart.yaml",
                        "trainer.total_training_steps=3", "trainer.test_freq=-1", "trainer.save_freq=-1",
                        "trainer.loggers=[jsonl]", f"trainer.output_dir={qs}", "--no-progress"], check=True)
            _write(out / "quickstart.jsonl", read_metrics(qs))
        sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
        from tests.e2e.helpers import train_tiny
        for name, kw in TINY.items():
            if only is not None and name not in only:
                continue
            _write(out / f"{name}.jsonl", train_tiny(Path(tmp) / name, steps=3, **kw))


def _write(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(_clean(r), sort_keys=True) + "\n" for r in rows))


def compare(a: Path, b: Path) -> int:
    """Every metric both runs log must be identical, row by row; keys only one side logs are listed (other features)."""
    bad = 0
    for fa in sorted(a.glob("*.jsonl")):
        rows_a = [json.loads(line) for line in fa.read_text().splitlines()]
        rows_b = [json.loads(line) for line in (b / fa.name).read_text().splitlines()]
        diffs = [(i, k, x[k], y[k]) for i, (x, y) in enumerate(zip(rows_a, rows_b)) for k in sorted(set(x) & set(y)) if x[k] != y[k]]
        shared = sum(len(set(x) & set(y)) for x, y in zip(rows_a, rows_b))
        only_a = sorted({k for x, y in zip(rows_a, rows_b) for k in set(x) - set(y)})
        only_b = sorted({k for x, y in zip(rows_a, rows_b) for k in set(y) - set(x)})
        same = not diffs and len(rows_a) == len(rows_b)
        print(f"{fa.name}: {len(rows_a)} rows, {shared} shared values {'bit-identical' if same else 'DIFFERENT'}"
              + (f"; only in {a.name}: {only_a}" if only_a else "") + (f"; only in {b.name}: {only_b}" if only_b else ""))
        for d in diffs[:10]:
            print("   row %d %s: %r vs %r" % d)
        bad += not same
    return 1 if bad else 0


if __name__ == "__main__":
    if sys.argv[1] == "--compare":
        sys.exit(compare(Path(sys.argv[2]), Path(sys.argv[3])))
    capture(Path(sys.argv[1]), set(sys.argv[2].split(",")) if len(sys.argv) > 2 else None)
