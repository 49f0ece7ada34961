"""A 2-step GRPO job with a tiny Qwen3-MoE on the megatron backend, expert parallelism 2 over 2 CPU processes (gloo),
against the same job with EP 1 on one process; writes RESULTS.md next to this file.

    python bench/megatron_moe/run.py [--out bench/megatron_moe/RESULTS.md] [--work /tmp/moe_grpo]

It is a bench (about 2-4 minutes of CPU here), not a test: plugins/train_megatron/tests/test_megatron_moe.py checks
EP 2 against EP 1 and the backward against transformers. The job: tiny Qwen3-MoE (4 experts, 2 per token, hidden 64,
2 layers) built from a config with random weights, the HF rollout engine, GRPO (4 prompts x 2 samples, one mini-batch),
the routers' aux / z losses on (moe_aux_loss_coeff 0.01, moe_z_loss_coeff 0.001), a checkpoint and an HF export at the
end. What to read: both runs finish, their metrics (moe/load_balancing_loss, moe/z_loss among them) and the exported
HF folder loads in transformers with the stacked expert tensors.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

from rl_core_testing.tiny_run import read_metrics, write_tiny_run

KEYS = ("actor/pg_loss", "actor/grad_norm", "actor/moe/load_balancing_loss", "actor/moe/z_loss", "reward/mean", "response_length/mean")


NOTE = ("The two runs sample their rollouts differently (one rollout replica vs two, each with its own random stream), so "
        "their numbers are not expected to be equal: EP 2 = EP 1 on the same batch is what test_megatron_moe.py checks.")


def run(work: Path, nprocs: int, ep: int) -> tuple[list[dict], float, str]:
    shutil.rmtree(work, ignore_errors=True)  # a fresh run (an earlier one's checkpoint would be resumed)
    cfg = write_tiny_run(
        work, nprocs=nprocs, model={"arch": "qwen3_moe"}, **{
            "train.name": "megatron", "train.expert_model_parallel_size": ep, "actor.ppo_mini_batch_size": 4,
            "actor.ppo_micro_batch_size_per_gpu": 1, "model.compile": False, "trainer.save_freq": 2,
            "train.options": {"transformer_config": {"moe_aux_loss_coeff": 0.01, "moe_z_loss_coeff": 0.001, "moe_router_dtype": "fp32"}},
        })
    t0 = time.time()
    proc = subprocess.run([sys.executable, "-m", "rl_core.cli.main", "train", str(cfg)], capture_output=True, text=True, timeout=900)
    took = time.time() - t0
    if proc.returncode:
        raise SystemExit(f"EP {ep}: rlcore train failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return read_metrics(work / "out"), took, str(work / "out")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(Path(__file__).with_name("RESULTS.md")))
    ap.add_argument("--work", default="/tmp/moe_grpo")
    args = ap.parse_args()
    work = Path(args.work)
    rows = {}
    for nprocs, ep in ((1, 1), (2, 2)):
        rows[ep] = run(work / f"ep{ep}", nprocs, ep)
    from transformers import AutoModelForCausalLM

    exported = sorted(Path(rows[2][2]).rglob("config.json"))
    loaded = [str(p.parent) for p in exported if AutoModelForCausalLM.from_pretrained(p.parent) is not None]
    lines = ["# 2-step GRPO, tiny Qwen3-MoE, megatron backend: EP 2 on 2 CPU processes vs EP 1", "",
             f"`python bench/megatron_moe/run.py` ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}); wall time EP 1 "
             f"{rows[1][1]:.0f} s, EP 2 {rows[2][1]:.0f} s on the shared 2-core machine.", "",
             "| step | metric | EP 1 (1 process) | EP 2 (2 processes) |", "|---|---|---|---|"]
    for i, (a, b) in enumerate(zip(rows[1][0], rows[2][0])):
        for k in KEYS:
            if k in a or k in b:
                lines.append(f"| {i + 1} | {k} | {a.get(k, '-'):.6g} | {b.get(k, '-'):.6g} |" if k in a and k in b else f"| {i + 1} | {k} | {a.get(k, '-')} | {b.get(k, '-')} |")
    lines += ["", NOTE, "", f"HF folders exported by the EP 2 run that load in transformers: {len(loaded)}", ""]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
