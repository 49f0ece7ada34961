"""Actor update MFU of the megatron train backend vs the fsdp backend on one GPU, the 0.5B and 1.5B shapes (issue 49).

    python bench/megatron_update_mfu_gpu.py                 # one GPU: both backends, 0.5B and 1.5B, ~3 min
    SMOKE=1 python bench/megatron_update_mfu_gpu.py         # CPU smoke run: the tiny shape, float32, gloo

The workload, FLOP count and peak are bench/update_mfu_gpu.py's (its functions): ``RoleEngine.update`` on-policy
GRPO, ``--rows`` sequences of ``--prompt`` + ``--response`` random tokens, random weights (bf16 compute over fp32
master weights on the GPU), one warm-up update then the median of ``--iters``; MFU = model FLOPs / time / the measured
bf16 matmul peak. The megatron engine runs in one spawned process (NCCL on the GPU, world 1: TP = PP = DP = 1, what
its card lists as native and reference is in plugins/train_megatron/README.md "What runs natively"); the fsdp engine
in this process. Writes ``$OUT/megatron_update_mfu.{json,md}`` with the ratio megatron / fsdp per shape (the issue's
gate: >= 0.8 on 1.5B).

On a GPU machine without megatron-core: ``pip install --no-deps --target /tmp/site`` its cp312 wheel (0.16.1) and run
with ``PYTHONPATH=/tmp/site:core:plugins/train_megatron:plugins/train_fsdp:plugins/testing`` (bench/DEVICE_RUNBOOK.md).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "bench"), str(REPO / "core"), str(REPO / "plugins" / "train_fsdp"), str(REPO / "plugins" / "train_megatron"),
                str(REPO / "plugins" / "testing")]

import attrs  # noqa: E402
import torch  # noqa: E402
import update_mfu_gpu as mfu  # noqa: E402


def _cfg(path: Path, args, micro: int, dtype: str, backend: str):
    cfg = mfu.run_config(path, rows=args.rows, prompt=args.prompt, response=args.response, micro=micro, dtype=dtype, chunk=2048, ckpt=False)
    return attrs.evolve(cfg, train=attrs.evolve(cfg.train, name=backend))


def run_megatron(rank: int, world: int, path: str, args, micro: int, dtype: str, device: str, vocab: int) -> dict:
    from rl_core.backends import WorkerContext
    from rl_train_megatron.engine import build_engine

    ctx = WorkerContext(rank=rank, world_size=world, local_rank=rank, device=device, seed=0)
    engine = build_engine("actor", _cfg(Path(path), args, micro, dtype, "megatron"), ctx)
    batch = mfu.step_batch(args.rows, args.prompt, args.response, vocab)
    try:
        t, mem = mfu.measure(engine, batch, device, args.iters)
    except torch.OutOfMemoryError:
        return {"error": "out of memory"}
    finally:
        engine.shutdown()
    return {"update_s": t, "peak_gib": mem}


def main() -> None:
    smoke = os.environ.get("SMOKE") == "1"
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=16 if smoke else 64)
    ap.add_argument("--prompt", type=int, default=16 if smoke else 128)
    ap.add_argument("--response", type=int, default=16 if smoke else 256)
    ap.add_argument("--iters", type=int, default=2)
    ap.add_argument("--plan", default=None, help="shape:micro ... (default '0.5b:16 1.5b:8'; smoke 'tiny:4')")
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() and not smoke else "cpu"
    dtype = "bfloat16" if device == "cuda" else "float32"
    out_dir = Path(os.environ.get("OUT", "/tmp/out"))
    out_dir.mkdir(parents=True, exist_ok=True)
    from rl_core.backends import WorkerContext
    from rl_core_testing.distributed import run_distributed
    from rl_train_fsdp.engine import build_engine as fsdp_engine

    peak = mfu.matmul_peak(device)
    print(f"measured matmul peak: {peak / 1e12:.1f} TFLOP/s", flush=True)
    plan = args.plan or ("tiny:4" if smoke else "0.5b:16 1.5b:8")
    root = Path(tempfile.mkdtemp(prefix="megatron_mfu_"))
    rows = []
    for shape, micro in ((s, int(m)) for s, m in (x.split(":") for x in plan.split())):
        vocab = 300 if shape == "tiny" else 50257
        path = mfu.model_dir(root, shape, vocab)
        flops = mfu.model_flops(shape, vocab, args.rows, args.prompt, args.response)
        tokens = args.rows * (args.prompt + args.response)
        engine = fsdp_engine("actor", _cfg(path, args, micro, dtype, "fsdp"), WorkerContext(device=device))
        try:
            t, mem = mfu.measure(engine, mfu.step_batch(args.rows, args.prompt, args.response, vocab), device, args.iters)
            res = {"update_s": t, "peak_gib": mem}
        except torch.OutOfMemoryError:
            res = {"error": "out of memory"}
        del engine
        if device == "cuda":
            torch.cuda.empty_cache()
        meg = run_distributed(run_megatron, 1, str(path), args, micro, dtype, device, vocab, backend="nccl" if device == "cuda" else "gloo",
                              timeout=900)[0]
        for backend, r in (("fsdp", res), ("megatron", meg)):
            row = {"shape": shape, "backend": backend, "micro": micro, **r}
            if "update_s" in r:
                row.update(tokens_per_s=tokens / r["update_s"], tflops=flops / r["update_s"] / 1e12, mfu=flops / r["update_s"] / peak)
            rows.append(row)
            print(json.dumps(row), flush=True)
    info = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "command": ("SMOKE=1 " if smoke else "") + "python " + " ".join(sys.argv),
            "device": torch.cuda.get_device_name() if device == "cuda" else "cpu", "torch": torch.__version__, "matmul_peak_tflops": peak / 1e12,
            "rows": args.rows, "prompt": args.prompt, "response": args.response}
    ratios = {}
    for shape in dict.fromkeys(r["shape"] for r in rows):
        by = {r["backend"]: r for r in rows if r["shape"] == shape}
        if "mfu" in by["fsdp"] and "mfu" in by["megatron"]:
            ratios[shape] = by["megatron"]["mfu"] / by["fsdp"]["mfu"]
    (out_dir / "megatron_update_mfu.json").write_text(json.dumps({"info": info, "rows": rows, "megatron_over_fsdp": ratios}, indent=1))
    lines = [f"# actor update MFU, megatron vs fsdp: {info['device']}, {info['date']}", "", f"`{info['command']}`; torch {info['torch']}; "
             f"measured matmul peak {peak / 1e12:.0f} TFLOP/s; {args.rows} x ({args.prompt} + {args.response}) tokens per update", "",
             "| shape | backend | micro | update s | tokens/s | MFU | peak GiB |", "|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['shape']} | {r['backend']} | {r['micro']} | " + (f"{r['error']} | | | |" if "error" in r else
                     f"{r['update_s']:.3f} | {r['tokens_per_s']:,.0f} | {100 * r['mfu']:.1f}% | {r['peak_gib']:.1f} |"))
    lines += ["", "megatron / fsdp MFU: " + ", ".join(f"{s} {v:.2f}" for s, v in ratios.items())]
    text = "\n".join(lines) + "\n"
    (out_dir / "megatron_update_mfu.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
