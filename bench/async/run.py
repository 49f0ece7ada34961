"""Issue #34's CPU bench: the quickstart with 1 rollout process + 1 train process, async.max_staleness 0 vs 1.

    python bench/async/run.py --steps 30 --test-freq 10 --seeds 0 --out bench/async/results
    python bench/async/run.py --data /tmp/qs/data --seeds 1 --staleness 0 --out OUT trainer.torch_threads=1   # one pair member

``--data DIR`` reads ``DIR/train-sSEED.jsonl`` and ``DIR/val.jsonl`` (bench/vs_trl_cpu.py's files: the same
basic_arithmetic task, written where reasoning-gym is installed) instead of the config's generators, for a
machine without reasoning-gym; trailing ``key=value`` arguments are passed to every run.

Runs each (seed, staleness) one after the other in this one invocation (``rlcore train`` subprocesses, the same
machine state for both), then writes ``report.md`` (python bench/async/report.py DIR). Both configs use the same
algorithm: rollout log-probs + token-level TIS (weights ~1 at staleness 0), so only the schedule differs.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--test-freq", type=int, default=10)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--staleness", type=int, nargs="+", default=[1, 0])
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    ap.add_argument("--data", help="a folder with train-sSEED.jsonl and val.jsonl (bench/vs_trl_cpu.py write_data)")
    ap.add_argument("overrides", nargs="*", help="key=value passed to every run")
    args = ap.parse_args()
    for seed in args.seeds:
        for s in args.staleness:
            out = os.path.join(args.out, f"seed{seed}_staleness{s}")
            cmd = [
                sys.executable, "-m", "rl_core.cli.main", "train", os.path.join(ROOT, "examples", "quickstart.yaml"),
                "rollout.n_gpus_per_node=1", f"async.max_staleness={s}",
                "rollout.calculate_log_probs=true", "algorithm.rollout_correction.rollout_is=token",
                f"trainer.total_training_steps={args.steps}", f"trainer.test_freq={args.test_freq}", f"trainer.seed={seed}",
                f"trainer.output_dir={out}", "trainer.loggers=[jsonl]", "trainer.save_freq=-1",
            ]
            if args.data:
                cmd += ["data.train_generator=null", "data.val_generator=null", "data.shuffle=false",
                        f"data.train_files=[{os.path.join(args.data, f'train-s{seed}.jsonl')}]",
                        f"data.val_files=[{os.path.join(args.data, 'val.jsonl')}]"]
            cmd += args.overrides
            if s != args.staleness[0]:  # step 0's greedy accuracy: the same initial weights, measured once per seed
                cmd.append("trainer.val_before_train=false")
            print(" ".join(cmd[2:]), flush=True)
            start = time.time()
            subprocess.run(cmd, check=True, cwd=ROOT)
            print(f"seed {seed} staleness {s}: {time.time() - start:.0f} s wall", flush=True)
    subprocess.run([sys.executable, os.path.join(HERE, "report.py"), args.out], check=True)


if __name__ == "__main__":
    main()
