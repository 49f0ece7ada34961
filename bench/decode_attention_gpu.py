"""One decode step's attention on the scale shape, alone: rl-hf-decode's Triton kernel against sdpa over the capacity
view (what the static decoder ran before), with achieved bandwidth against the copy bandwidth measured here.

    python bench/decode_attention_gpu.py                # GPU: ~30 s (one compile per kernel configuration)
    SMOKE=1 python bench/decode_attention_gpu.py        # CPU, Triton's interpreter, tiny shapes

Shape (bench/rollout_gpu.py's ``scale`` workload, Qwen2.5-1.5B's attention): 256 rows, 12 query heads over 2 kv
heads, head dim 128, bf16, a slot-major cache of 1,152 slots; the step writes slot ``--slot`` (default 640: the mean
context of 128 + 1,024 tokens), the capacity the decoder attends over is that slot rounded up to 256 (768). Bytes
read: the kernel, keys + values of slots 0..slot of every row; sdpa, those of the whole capacity (and its mask). Each
configuration is timed over ``--iters`` calls with CUDA events after a warm-up; the table gives microseconds a layer
call, the bytes that call must read and GB/s. ``--configs`` adds kernel variants (BLOCK_N / warps / stages).

Writes ``$OUT/decode_attention.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

SMOKE = os.environ.get("SMOKE") == "1"
if SMOKE:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "plugins" / "hf_decode"))
import rl_hf_decode.decode_attention as da  # noqa: E402
from rl_hf_decode.static_decode import _sdpa_decode  # noqa: E402


def timed_us(fn, iters: int, device: str) -> float:
    fn()
    if device != "cuda":
        t = time.perf_counter()
        for _ in range(iters):
            fn()
        return (time.perf_counter() - t) / iters * 1e6
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters * 1e3


def copy_gbs(device: str) -> float | None:
    if device != "cuda":
        return None
    x = torch.empty(2**30, dtype=torch.uint8, device=device)
    y = torch.empty_like(x)
    us = timed_us(lambda: y.copy_(x), 20, device)
    return 2 * x.numel() / us / 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=4 if SMOKE else 256)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--kv", type=int, default=2)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--length", type=int, default=256 if SMOKE else 1152)
    ap.add_argument("--slot", type=int, default=100 if SMOKE else 640)
    ap.add_argument("--chunk", type=int, default=128 if SMOKE else 256)
    ap.add_argument("--iters", type=int, default=2 if SMOKE else 200)
    ap.add_argument("--configs", default="" if SMOKE else "32:4:3,64:4:2,64:4:4,64:8:3,128:4:2,128:8:3",
                    help="extra kernel variants BLOCK_N:warps:stages, comma-separated")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/out"))
    args = ap.parse_args()
    device = "cpu" if SMOKE else "cuda"
    dtype = torch.bfloat16
    g = torch.Generator(device=device).manual_seed(0)
    shape = (args.length, args.rows, args.kv, args.dim)
    k = torch.randn(shape, generator=g, device=device).to(dtype)
    v = torch.randn(shape, generator=g, device=device).to(dtype)
    q = torch.randn((args.rows, args.heads, args.dim), generator=g, device=device).to(dtype)
    valid = torch.zeros(args.length, args.rows, dtype=torch.bool, device=device)
    valid[: args.slot + 1] = True
    valid[:16, ::2] = False  # some left padding
    slot = torch.tensor([args.slot], device=device)
    cap = min(args.length, (args.slot // args.chunk + 1) * args.chunk)
    scale = args.dim**-0.5
    sms = torch.cuda.get_device_properties(0).multi_processor_count if device == "cuda" else 1
    per_slot = args.rows * args.kv * args.dim * 2 * 2  # keys + values of one slot, every row
    want = _sdpa_decode(q, k[:cap], v[:cap], valid[:cap], scale, args.kv)
    rows = []

    def add(name, fn, nbytes, **extra):
        got = fn()
        err = float((got.float() - want.float()).abs().max())
        us = timed_us(fn, args.iters, device)
        rows.append(dict(name=name, us=round(us, 2), bytes=nbytes, gbs=round(nbytes / us / 1e3, 1), max_abs_err=err, **extra))
        print(rows[-1], flush=True)

    add("sdpa over the capacity view (before)", lambda: _sdpa_decode(q, k[:cap], v[:cap], valid[:cap], scale, args.kv), cap * per_slot, capacity=cap)
    splits = da.splits_for(args.rows, args.kv, cap, sms)
    default = (da.BLOCK_N, da.NUM_WARPS, da.NUM_STAGES)
    for spec in [None] + [c for c in args.configs.split(",") if c]:
        if spec is not None:
            da.BLOCK_N, da.NUM_WARPS, da.NUM_STAGES = (int(x) for x in spec.split(":"))
        label = f"triton BLOCK_N={da.BLOCK_N} warps={da.NUM_WARPS} stages={da.NUM_STAGES}" + (" (default)" if spec is None else "")
        try:
            add(label, lambda: da.decode_attention(q, k[:cap], v[:cap], valid[:cap], slot, scale, splits), (args.slot + 1) * per_slot, splits=splits)
        except Exception as exc:  # noqa: BLE001 - a configuration that does not fit (shared memory): noted, the rest run
            rows.append(dict(name=label, error=f"{type(exc).__name__}: {exc}"[:300]))
            print(rows[-1], flush=True)
        da.BLOCK_N, da.NUM_WARPS, da.NUM_STAGES = default
    copy = copy_gbs(device)
    info = dict(device=torch.cuda.get_device_name(0) if device == "cuda" else "cpu (Triton interpreter)", torch=torch.__version__,
                triton=getattr(da.triton, "__version__", None), copy_gbs=copy, shape=vars(args) | {"capacity": cap, "splits": splits})
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "decode_attention.json").write_text(json.dumps({"info": info, "rows": rows}, indent=1))
    lines = [f"# One decode step's attention, one layer: {info['device']}", "",
             f"`{' '.join(['python', *sys.argv])}`; torch {info['torch']}, triton {info['triton']}; {args.rows} rows, "
             f"{args.heads} / {args.kv} heads, d {args.dim}, slot {args.slot} (capacity {cap}); copy bandwidth "
             f"{'-' if copy is None else f'{copy:.0f} GB/s'}", "",
             "| | us | MB read | GB/s | max abs err vs sdpa |", "|---|---:|---:|---:|---:|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['name']} | {r['error']} | | | |")
        else:
            lines.append(f"| {r['name']} | {r['us']:.1f} | {r['bytes'] / 1e6:.1f} | {r['gbs']:.0f} | {r['max_abs_err']:.2g} |")
    (out / "decode_attention.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
