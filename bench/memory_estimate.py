"""Measured peak memory of a short training run next to `rlcore check`'s estimate (rl_memory_estimate.estimate).

    python bench/memory_estimate.py CONFIG [key=value ...] [--out bench/results/memory_estimate_X.md]

Runs ``rlcore train CONFIG overrides trainer.total_training_steps=STEPS`` in a child process (a fresh
output folder, no progress bar) after converting a built-in model in another process, so the
conversion's memory is not counted. Measures:

- CPU runs: the training process's peak RSS (``os.wait4``'s ``ru_maxrss``; one rank runs in-process);
- GPU runs: the largest ``perf/max_memory_allocated_gb`` the trainer logged (torch's
  ``max_memory_allocated``, reset each step) and the child's peak RSS.

Writes a markdown table: each estimate term, each phase's estimated peak, the measured peak and the
ratio. ``SMOKE=1`` runs 1 step (a check that the script works).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

GB = 2**30


def _estimate(config: str, overrides: list[str]):
    from rl_core.config.load import load_config
    from rl_memory_estimate.estimate import estimate
    from rl_core.plan.resolver import resolve

    cfg = load_config(config, overrides)
    stack, problems = resolve(cfg)
    if stack is None:
        sys.exit("the config does not resolve:\n" + "\n".join(p.render() for p in problems))
    est = estimate(stack.config, stack.sizes, rollout=stack.rollout, train=stack.train, features=stack.features)
    if est is None:
        sys.exit(f"the shape of {cfg.model.path!r} is unknown: point model.path at a local folder")
    return stack, est


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config")
    ap.add_argument("overrides", nargs="*")
    ap.add_argument("--steps", type=int, default=1 if os.environ.get("SMOKE") else 2)
    ap.add_argument("--out", help="markdown file to write (default: print only)")
    ap.add_argument("--keep-metrics", help="copy the run's metrics.jsonl here")
    args = ap.parse_args()

    run_dir = tempfile.mkdtemp(prefix="memest_")
    overrides = [*args.overrides, f"trainer.total_training_steps={args.steps}", f"trainer.output_dir={run_dir}"]
    if os.environ.get("SMOKE"):
        overrides += ["trainer.test_freq=-1", "trainer.save_freq=-1"]
    stack, est = _estimate(args.config, overrides)
    path = stack.config.model.path
    if path.startswith("builtin:"):  # convert once, in its own process
        subprocess.run([sys.executable, "-c", f"from rl_core.plan.builtin_model import ensure_builtin_model as e; from rl_model_smollm2.convert import convert_smollm2 as c; e(c, {path.split(':', 1)[1]!r})"], check=True)

    start = time.time()
    log = os.path.join(run_dir, "train.log")
    with open(log, "w") as f:
        proc = subprocess.Popen([sys.executable, "-m", "rl_core", "train", args.config, *overrides, "--no-progress"], stdout=f, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own resource usage (not the converter's)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.time() - start
    if proc.returncode != 0:
        sys.stderr.write(open(log).read()[-6000:])
        return proc.returncode
    rss = usage.ru_maxrss * 1024  # kB on Linux
    gpu = None
    metrics = os.path.join(run_dir, "metrics.jsonl")
    if args.keep_metrics and os.path.exists(metrics):
        shutil.copyfile(metrics, args.keep_metrics)
    if os.path.exists(metrics):
        peaks = [json.loads(line).get("perf/max_memory_allocated_gb") for line in open(metrics) if line.strip()]
        peaks = [p for p in peaks if p is not None]
        gpu = max(peaks) * GB if peaks else None
    measured, what = (gpu, "torch.cuda.max_memory_allocated") if gpu is not None else (rss, "peak RSS of the training process")

    rows = [f"# Memory estimate vs measured peak: `{args.config}`", ""]
    rows.append(f"Command: `python bench/memory_estimate.py {args.config} {' '.join(args.overrides)}` ({args.steps} training steps, {wall:.0f} s).")
    rows.append(f"Machine: {platform.machine()}, {os.cpu_count()} cores, {platform.python_version()}; device {est.device}.")
    rows += ["", "| term | estimate (GiB) |", "|---|---:|"]
    rows += [f"| {k} | {v / GB:.2f} |" for k, v in est.terms.items() if v]
    rows += [f"| **peak in {k}** | **{v / GB:.2f}** |" for k, v in est.phases.items()]
    rows += ["", f"Measured ({what}): **{measured / GB:.2f} GiB**; estimate {est.peak / GB:.2f} GiB; "
             f"estimate / measured = **{est.peak / measured:.2f}** ({(est.peak / measured - 1) * 100:+.0f}%)."]
    if gpu is not None:
        rows.append(f"Peak RSS of the training process: {rss / GB:.2f} GiB.")
    text = "\n".join(rows) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
