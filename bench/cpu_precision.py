"""float32 vs bfloat16 on this CPU: the matrix products, then the quickstart's steps (why ``model.dtype: auto``).

    python bench/cpu_precision.py --steps 3 --out bench/results/cpu_precision.md

1. ``torch.nn.functional.linear`` at the quickstart model's shapes (SmolLM2-135M: hidden 576, MLP 1536, vocab
   49152; 512 tokens), float32, bfloat16 tensors and float32 under bfloat16 autocast: GFLOP/s.
2. ``rlcore train examples/quickstart.yaml`` for ``--steps`` steps with ``model.dtype=float32`` and with
   ``bfloat16``, one after the other (no validation, no checkpoints): seconds per step and per stage
   (the first step included: it is not slower than the rest on a CPU).

The CPU's bfloat16 support (AMX, AVX512-BF16, or neither) and what ``auto`` picks are printed on top.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHAPES = {"q/k/v/o (576 x 576)": (576, 576), "MLP up (576 -> 1536)": (1536, 576), "MLP down (1536 -> 576)": (576, 1536), "LM head (576 -> 49152)": (49152, 576)}
TOKENS = 512


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def matmul_table() -> list[str]:
    import torch

    torch.manual_seed(0)
    rows = ["| product | float32 GFLOP/s | bfloat16 GFLOP/s | bf16 autocast GFLOP/s | bfloat16 / float32 time |", "|---|---:|---:|---:|---:|"]
    for name, (out_f, in_f) in SHAPES.items():
        x, w = torch.randn(TOKENS, in_f), torch.randn(out_f, in_f)
        flops = 2 * TOKENS * in_f * out_f
        rates = []
        for mode in ("float32", "bfloat16", "autocast"):
            a, b = (x.bfloat16(), w.bfloat16()) if mode == "bfloat16" else (x, w)
            ctx = torch.autocast("cpu", dtype=torch.bfloat16) if mode == "autocast" else torch.no_grad()
            with ctx, torch.no_grad():
                for _ in range(2):
                    torch.nn.functional.linear(a, b)
                reps, start = 0, time.perf_counter()
                while time.perf_counter() - start < 1.0:
                    torch.nn.functional.linear(a, b)
                    reps += 1
                rates.append(flops * reps / (time.perf_counter() - start) / 1e9)
        rows.append(f"| {name} | {rates[0]:.1f} | {rates[1]:.1f} | {rates[2]:.1f} | {rates[0] / rates[1]:.1f}x |")
    return rows


def quickstart_steps(dtype: str, steps: int) -> dict:
    out = Path(tempfile.mkdtemp(prefix=f"cpu_precision_{dtype}_"))
    cmd = [sys.executable, "-m", "rl_core", "train", str(ROOT / "examples" / "quickstart.yaml"), f"model.dtype={dtype}",
           f"trainer.total_training_steps={steps}", "trainer.test_freq=-1", "trainer.val_before_train=false", "trainer.save_freq=-1",
           "trainer.loggers=[jsonl]", f"trainer.output_dir={out / 'run'}", "--no-progress"]
    start = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    rows = [json.loads(line) for line in (out / "run" / "metrics.jsonl").read_text().splitlines() if line.strip()]
    shutil.rmtree(out, ignore_errors=True)
    rows = [r for r in rows if "timing_s/step" in r]
    keys = ("timing_s/gen", "timing_s/update_actor", "timing_s/step")
    return {"dtype": dtype, "wall_s": time.time() - start, "steps": [{k: r[k] for k in keys if k in r} for r in rows],
            "command": " ".join(cmd).replace(str(ROOT) + "/", "")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=3, help="quickstart steps per dtype (0: matrix products only)")
    ap.add_argument("--out", type=Path, help="write the report here (markdown) as well as printing it")
    args = ap.parse_args()
    import torch
    from rl_core.util.precision import cpu_bf16_support, cpu_capability, resolve_dtype

    auto, why = resolve_dtype("auto", "cpu")
    lines = [
        "# float32 vs bfloat16 on this CPU", "",
        f"`python bench/cpu_precision.py --steps {args.steps}`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
        f"{cpu_name()}, {os.cpu_count()} cores, torch {torch.__version__} "
        f"({torch.get_num_threads()} threads), kernels for {cpu_capability()}, bfloat16 hardware: {cpu_bf16_support() or 'none'}; "
        f"`model.dtype: auto` picks {auto} ({why}).", "",
        f"## Matrix products ({TOKENS} tokens x the quickstart model's weights)", "", *matmul_table(),
    ]
    if args.steps:
        runs = [quickstart_steps(d, args.steps) for d in ("float32", "bfloat16")]
        lines += ["", f"## The quickstart, {args.steps} steps each (8 prompts x 4 samples, 16 new tokens)", "",
                  "| model.dtype | s/step (median) | generation s (median) | update s (median) | every step (s) |", "|---|---:|---:|---:|---|"]
        for run in runs:
            med = {k: statistics.median(s[k] for s in run["steps"]) for k in ("timing_s/step", "timing_s/gen", "timing_s/update_actor")}
            every = ", ".join(f"{s['timing_s/step']:.1f}" for s in run["steps"])
            lines.append(f"| {run['dtype']} | {med['timing_s/step']:.2f} | {med['timing_s/gen']:.2f} | {med['timing_s/update_actor']:.2f} | {every} |")
        lines += ["", "Commands:", ""] + [f"    {run['command']}" for run in runs]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
