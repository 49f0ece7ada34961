"""Train the calculator example with the tool and without it (the baseline), then tabulate the validation curves.

    python bench/agent_calculator/run.py --tiny                         # CPU smoke: a 2-layer random model, 1 step (minutes)
    python bench/agent_calculator/run.py --device cpu --steps 2 --test-freq 2 --val 8 --batch 4 --n 4
    python bench/agent_calculator/run.py --device cuda --steps 40 --test-freq 5 --rollout hf     # one H100
    python bench/agent_calculator/run.py --device cuda --steps 40 --test-freq 5 --rollout vllm --no-baseline

Each run is ``rlcore train examples/agent_calculator.yaml`` with overrides; the table (``--out``, default
``bench/agent_calculator/results_<device>.md``) has, per validation step, for both runs: accuracy (the
product in the final answer, greedy), the tool-call rate (calls per trajectory), the valid-call rate (calls
that ran, per trajectory) and the seconds since the start, plus per-step timings (gen / reward / update) of
the training steps (seconds) and trajectories per second of generation. Everything is read back from each
run's ``metrics.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
TINY_MODEL = {"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 2, "num_key_value_heads": 1}


def overrides(args, out_dir: Path, data: Path, tool: bool) -> list[str]:
    o = [
        f"trainer.device={args.device}",
        f"trainer.total_training_steps={args.steps}",
        f"trainer.test_freq={args.test_freq}",
        f"trainer.output_dir={out_dir}",
        f"data.train_files=[{data}/train.jsonl]",
        f"data.val_files=[{data}/val.jsonl]",
        f"data.train_batch_size={args.batch}",
        f"actor.ppo_mini_batch_size={args.batch}",
        f"actor.ppo_micro_batch_size_per_gpu={args.batch * args.n}",
        f"rollout.n={args.n}",
        f"rollout.name={args.rollout}",
        "trainer.val_before_train=true",
    ]
    if not tool:
        o.append("rollout.multi_turn.enable=false")
    if args.tiny:
        o += ["model.random_init=true", "data.max_response_length=40", "rollout.multi_turn.max_tokens_per_turn=16",
              "model.override_config=" + json.dumps(TINY_MODEL, separators=(",", ":"))]
    return o + list(args.override)


def train(args, name: str, tool: bool, data: Path) -> tuple[Path, float]:
    out_dir = Path(args.work) / name
    if (out_dir / "metrics.jsonl").exists():
        (out_dir / "metrics.jsonl").unlink()
    cmd = [sys.executable, "-m", "rl_core.cli.main", "train", str(ROOT / "examples/agent_calculator.yaml"), *overrides(args, out_dir, data, tool)]
    print("$", " ".join(cmd), flush=True)
    start = time.time()
    subprocess.run(cmd, check=True, cwd=ROOT)
    return out_dir, time.time() - start


def rows(out_dir: Path) -> list[dict]:
    return [json.loads(line) for line in open(out_dir / "metrics.jsonl", encoding="utf-8") if line.strip()]


def val_table(metrics: list[dict]) -> list[dict]:
    out, t0 = [], (metrics[0]["time"] if metrics else 0.0)
    for m in metrics:
        if "val/accuracy" not in m:
            continue
        traj = m.get("val/agent/trajectories") or m.get("val/samples") or 1.0
        calls = m.get("val/agent/tool_calls", 0.0)
        bad = m.get("val/agent/tool_errors", 0.0) + m.get("val/agent/tool_timeouts", 0.0)
        out.append({"step": int(m["step"]), "seconds": m["time"] - t0, "accuracy": m["val/accuracy"], "tool_call_rate": calls / traj,
                    "valid_call_rate": (calls - bad) / traj, "reward_mean": m.get("val/reward_mean")})
    return out


def step_times(metrics: list[dict]) -> dict[str, float]:
    keys = [k for k in ("timing_s/gen", "timing_s/reward", "timing_s/update_actor", "timing_s/step") if any(k in m for m in metrics)]
    steps = [m for m in metrics if "timing_s/step" in m]
    return {k: sum(m.get(k, 0.0) for m in steps) / max(1, len(steps)) for k in keys}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tiny", action="store_true", help="CPU smoke: random 2-layer model, 1 step, 2 prompts")
    p.add_argument("--device", default="cpu")
    p.add_argument("--rollout", default="hf")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--test-freq", type=int, default=10)
    p.add_argument("--val", type=int, default=64, help="validation prompts")
    p.add_argument("--batch", type=int, default=8, help="prompts per step")
    p.add_argument("--n", type=int, default=4, help="samples per prompt")
    p.add_argument("--no-baseline", action="store_true", help="skip the no-tool run")
    p.add_argument("--work", default="outputs/agent_calculator_bench")
    p.add_argument("--out", default=None)
    p.add_argument("override", nargs="*", help="more key=value overrides for both runs")
    args = p.parse_args()
    if args.tiny:
        args.device, args.steps, args.test_freq, args.val, args.batch, args.n = "cpu", 1, 1, 2, 2, 2
    data = Path(args.work) / "data"
    subprocess.run([sys.executable, str(HERE / "make_data.py"), str(data), "2000", str(args.val)], check=True, cwd=ROOT)
    results = {}
    for name, tool in (("with_tool", True), ("no_tool", False)):
        if not tool and args.no_baseline:
            continue
        out_dir, seconds = train(args, name, tool, data)
        metrics = rows(out_dir)
        times = step_times(metrics)
        if times.get("timing_s/gen"):
            times["trajectories_per_s (gen)"] = args.batch * args.n / times["timing_s/gen"]
        results[name] = {"seconds": seconds, "val": val_table(metrics), "step_times": times}
    out = Path(args.out or HERE / f"results_{'tiny' if args.tiny else args.device}_{args.rollout}.md")
    lines = [f"# agent_calculator: {' '.join(sys.argv[1:]) or '(defaults)'}", "", f"- python {' '.join(sys.argv)}", ""]
    for name, r in results.items():
        lines += [f"## {name} ({r['seconds']:.0f} s wall, mean per training step: " + ", ".join(f"{k} {v:.2f}" for k, v in r["step_times"].items()) + ")", "",
                  "| step | s since start | val accuracy | tool calls / traj | valid calls / traj | val reward mean |", "|---|---|---|---|---|---|"]
        lines += [f"| {v['step']} | {v['seconds']:.0f} | {v['accuracy']:.3f} | {v['tool_call_rate']:.2f} | {v['valid_call_rate']:.2f} | {v['reward_mean']:.3f} |" for v in r["val"]]
        lines.append("")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    (out.with_suffix(".json")).write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    print(out.read_text())
    if args.tiny:
        assert all(r["val"] for r in results.values()), "a run logged no validation"
    os.sys.stdout.flush()


if __name__ == "__main__":
    main()
