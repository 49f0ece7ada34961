"""Issue 54's scaling table: the scale workload on 1, 2, 4 and 8 GPUs, one device command per GPU count and rollout.

    python bench/scaling/run.py --gpus 1 --rows hf,vllm --out $OUT                 # the baseline (one GPU)
    python bench/scaling/run.py --gpus 2 --rows hf_weak,hf_strong --out $OUT       # FSDP DP 2, hf rollout
    python bench/scaling/run.py --gpus 2 --rows vllm_weak,vllm_strong --out $OUT   # FSDP DP 2, vLLM rollout (TP 1 per GPU)
    python bench/scaling/run.py --gpus 2 --rows vllm_tp2 --out $OUT                # vLLM TP 2 for the rollout, FSDP DP 2
    python bench/scaling/run.py --table DIR1 DIR2 ... > scaling.md                 # every call's results in one table
    python bench/scaling/run.py --gpus 2 --tiny --out /tmp/scaling_tiny            # CPU smoke: tiny model, gloo, 2 processes

The scale workload (issue 35: bench/verl/run_verl_gpu.sh's SCALE_ARGS on bench/reference/grpo_reference.yaml): the 1.5B
shape with the GPT-2 vocabulary (``.gpu/qwen15b-gpt2``, random bf16 weights), 128 + 1,024 tokens, n = 8, gradient
checkpointing, micro-batches of 16, model.compile, one on-policy update per step, a coin reward. Rows:

- ``*_weak``: 32 prompts x 8 per GPU (``data.train_batch_size = 32 x GPUs``): the same work per GPU;
- ``*_strong``: 32 prompts x 8 in all, split over the GPUs;
- ``hf`` / ``vllm`` (on one GPU weak and strong are the same run); ``vllm_tp2``: weak, ``rollout.tensor_model_parallel_size=2``.

Per run, medians over the steps after ``--skip``: the step, tokens/s per GPU, the generation / update / weight-sync
(and old-log-prob, if any) shares of the step, the measured peak per rank (``perf/max_memory_allocated_gb``, the
largest rank's) next to ``rlcore check``'s estimate per rank for the same config. ``--table`` adds the efficiencies
against the one-GPU rows: weak = tokens/s per GPU over the one-GPU run's (acceptance >= 85% on 2 GPUs, >= 80% on 4
and 8), strong = step time over the one-GPU step (acceptance <= 0.6 on 2 GPUs).

Writes ``scaling_<gpus>.md``, ``scaling_<gpus>.results.json`` and ``scaling_<gpus>_raw.tgz`` (metrics, configs, logs)
under ``--out`` after every run, so a call killed at its limit still returns what finished (bench/two_gpu/run.py's
Deadline / Part machinery). bench/DEVICE_RUNBOOK.md, "Scaling table first", has the device calls.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def _two_gpu():
    spec = importlib.util.spec_from_file_location("two_gpu_run", ROOT / "bench" / "two_gpu" / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


T = _two_gpu()
REFERENCE = ROOT / "bench" / "reference" / "grpo_reference.yaml"
SCALE = ["model.path=.gpu/qwen15b-gpt2", "data.max_response_length=1024", "model.enable_gradient_checkpointing=true",
         "actor.ppo_micro_batch_size_per_gpu=16"]
PROMPTS = 32  # per GPU (weak) or in all (strong)
VLLM = ["rollout.name=vllm", "rollout.calculate_log_probs=true"]
ROWS = {  # name: (rollout overrides, weak scaling, rollout TP)
    "hf": (["rollout.name=hf"], True, 1), "hf_weak": (["rollout.name=hf"], True, 1), "hf_strong": (["rollout.name=hf"], False, 1),
    "vllm": (VLLM, True, 1), "vllm_weak": (VLLM, True, 1), "vllm_strong": (VLLM, False, 1),
    "vllm_tp2": ([*VLLM, "rollout.tensor_model_parallel_size=2"], True, 2),
}
STAGES = ("gen", "update_actor", "sync_weights", "old_log_prob")


def row_overrides(name: str, gpus: int, tiny: bool) -> list[str]:
    rollout, weak, _tp = ROWS[name]
    prompts = (2 if tiny else PROMPTS) * (gpus if weak else 1)  # tiny: 2 prompts x 2 per "GPU" (gloo process)
    sizes = [f"trainer.n_gpus_per_node={gpus}", f"data.train_batch_size={prompts}", f"actor.ppo_mini_batch_size={prompts}"]
    if tiny:
        return [*[o for o in rollout if o.startswith("rollout.name")], *sizes, "actor.ppo_micro_batch_size_per_gpu=2"]
    return [*SCALE, *rollout, *sizes]


def estimate_per_rank(config: Path, overrides: list[str]) -> tuple[float | None, str]:
    """``rlcore check``'s largest phase peak per rank (GiB) and its header line, for the run's config."""
    cmd = [sys.executable, "-m", "rl_core", "check", str(config), *overrides]
    proc = subprocess.run(cmd, cwd=ROOT, env=T.run_env(), capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    peaks = [float(m) for m in re.findall(r"^\s+peak in .*?([\d.]+) GiB$", out, re.M)]
    header = next((x.strip() for x in out.splitlines() if x.startswith("memory estimate")), f"no estimate (check exit {proc.returncode})")
    return (max(peaks) if peaks else None), header


def medians(rows: list[dict]) -> dict[str, float]:
    step = T.med([r["timing_s/step"] for r in rows])
    out = {"step": step, "tok_s_gpu": T.med([r.get("perf/throughput_tokens_per_s_per_device", float("nan")) for r in rows]),
           "peak_gb": T.med([r.get("perf/max_memory_allocated_gb", float("nan")) for r in rows])}
    for k in STAGES:
        out[k] = T.med([r.get(f"timing_s/{k}", 0.0) for r in rows])
    return out


HEADER = ("| row | GPUs | prompts x n | exit | steps | step s | tokens/s per GPU | gen | update | sync | old log-prob | "
          "peak GB per rank (measured, largest rank) | estimate GB per rank (rlcore check) |")


def line(r: dict) -> str:
    m = r.get("medians")
    if not m:
        return f"| {r['name']} | {r['gpus']} | {r['batch']} | {r['rc']} | 0 | | | | | | | | {r.get('estimate_gb') or '-'} |"
    share = lambda k: f"{m[k] / m['step']:.0%}" if m["step"] == m["step"] and m["step"] > 0 else "-"  # noqa: E731
    est = f"{r['estimate_gb']:.1f}" if r.get("estimate_gb") is not None else "-"
    return (f"| {r['name']} | {r['gpus']} | {r['batch']} | {r['rc']} | {r['steps']} | {m['step']:.2f} | {m['tok_s_gpu']:.0f} | {share('gen')} | "
            f"{share('update_actor')} | {share('sync_weights')} | {share('old_log_prob')} | {m['peak_gb']:.1f} | {est} |")


def run_rows(args) -> None:
    if not args.tiny:
        T.need_gpus(args.gpus)
    part = T.Part(args.out, f"scaling_{args.gpus}", f"# Scaling table rows on {args.gpus} GPU(s) (issue 54)\n\n"
                  f"`python bench/scaling/run.py --gpus {args.gpus} --rows {args.rows}{' --tiny' if args.tiny else ''} --steps {args.steps} "
                  f"--skip {args.skip}`; medians over steps {args.skip + 1}..{args.steps}; shares of the step.")
    part.lines = [HEADER, "|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.rows.split(","):
            if name not in ROWS:
                raise SystemExit(f"--rows: unknown row {name!r}; rows: {', '.join(ROWS)}")
            rollout, weak, tp = ROWS[name]
            prompts = (2 if args.tiny else PROMPTS) * (args.gpus if weak else 1)
            batch = f"{prompts} x {2 if args.tiny else 8}"
            if args.tiny and "rollout.name=vllm" in rollout:
                run = T.skipped(name, "vLLM needs a GPU (the CPU smoke runs the hf rows)")
            elif tp > args.gpus:
                run = T.skipped(name, f"rollout TP {tp} needs {tp} GPUs")
            else:
                run_dir = Path(tmp) / name / "out"
                config = T.tiny_config(Path(tmp) / name, nprocs=args.gpus, steps=args.steps) if args.tiny else REFERENCE
                overrides = [*row_overrides(name, args.gpus, args.tiny), f"trainer.total_training_steps={args.steps}",
                             "trainer.loggers=[console,jsonl]", *args.extra]
                est, header = estimate_per_rank(config, overrides)
                env = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"} if "rollout.name=vllm" in rollout else None
                timeout = args.deadline.timeout(args.run_timeout, args.min_run)
                if timeout is None:
                    run = T.skipped(name, "the call's --deadline leaves too little time")
                else:
                    run = T.finish(T.start_train(name, config, overrides, run_dir, env), timeout, stop_after=args.steps)
                rows = T.timed_rows(run["rows"], args.skip)
                run.update(steps=len([r for r in run["rows"] if "timing_s/step" in r]), estimate_gb=est, estimate_header=header)
                if rows:
                    run["medians"] = medians(rows)
            run.update(gpus=args.gpus, batch=batch, weak=weak, rollout=name.split("_")[0] if name != "vllm_tp2" else "vllm_tp2")
            part.lines.append(line(run))
            print(part.lines[-1], flush=True)
            files = {"config.yaml": Path(tmp) / name / "out" / "config.yaml", "train.log": Path(tmp) / name / "out" / "train.log"}
            part.add(run, files)


def table(dirs: list[Path]) -> str:
    """Every ``scaling_*.results.json`` under ``dirs`` in one table, with the efficiencies against the one-GPU rows."""
    runs = []
    for d in dirs:
        for f in sorted(Path(d).glob("scaling_*.results.json")):
            runs += [r for r in json.loads(f.read_text())["runs"] if r.get("medians")]
    base = {r["rollout"]: r["medians"] for r in runs if r["gpus"] == 1}
    out = [HEADER + " weak efficiency | strong step vs 1 GPU |", "|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in sorted(runs, key=lambda r: (r["rollout"], r["gpus"], not r["weak"])):
        b = base.get("vllm" if r["rollout"] == "vllm_tp2" else r["rollout"])
        weak = f"{r['medians']['tok_s_gpu'] / b['tok_s_gpu']:.0%}" if b and r["weak"] and r["gpus"] > 1 else "-"
        strong = f"{r['medians']['step'] / b['step']:.2f}" if b and not r["weak"] and r["gpus"] > 1 else "-"
        out.append(line(r) + f" {weak} | {strong} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", type=int, choices=[1, 2, 4, 8])
    ap.add_argument("--rows", default=None, help=f"comma-separated: {', '.join(ROWS)} (default: hf_weak,hf_strong; one GPU: hf)")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--table", nargs="+", type=Path, help="folders of earlier calls' results: print the merged table")
    ap.add_argument("--tiny", action="store_true", help="CPU smoke run: tiny random model, gloo, one process per GPU")
    ap.add_argument("--steps", type=int, default=None, help="steps per run (default 5; tiny 2)")
    ap.add_argument("--skip", type=int, default=None, help="first steps left out of the medians (default 2: compile, warm-up; tiny 1)")
    ap.add_argument("--run-timeout", type=float, default=280, help="seconds one run may take before it is killed")
    ap.add_argument("--deadline", type=float, default=None, help="seconds after $CALL_START by which every run has ended (device: 560)")
    ap.add_argument("--extra", nargs="*", default=[], help="config overrides added to every run")
    args = ap.parse_args(argv)
    if args.table:
        print(table(args.table))
        return 0
    if not args.gpus or not args.out:
        ap.error("--gpus and --out (or --table)")
    args.rows = args.rows or ("hf" if args.gpus == 1 else "hf_weak,hf_strong")
    args.steps = args.steps or (2 if args.tiny else 5)
    args.skip = args.skip if args.skip is not None else (1 if args.tiny else 2)
    args.deadline = T.Deadline(args.deadline if args.deadline is not None else (None if args.tiny else 560))
    args.min_run = 20 if args.tiny else 150
    run_rows(args)
    print((args.out / f"scaling_{args.gpus}.md").read_text(), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
