"""Actor update MFU of the megatron train backend vs the fsdp backend on one GPU, the 0.5B and 1.5B shapes (issue 49).

    python bench/megatron_update_mfu_gpu.py                 # one GPU: the 1.5B shape, fsdp / megatron / megatron-distopt, profiled
    python bench/megatron_update_mfu_gpu.py --plan "0.5b:16 1.5b:8"   # both shapes
    SMOKE=1 python bench/megatron_update_mfu_gpu.py         # CPU smoke run: the tiny shape, float32, gloo

The workload, FLOP count and peak are bench/update_mfu_gpu.py's (its functions): ``RoleEngine.update`` on-policy
GRPO, ``--rows`` sequences of ``--prompt`` + ``--response`` random tokens, random weights (bf16 compute over fp32
master weights on the GPU), one warm-up update then the median of ``--iters``; MFU = model FLOPs / time / the measured
bf16 matmul peak. The megatron engine runs in one spawned process (NCCL on the GPU, world 1: TP = PP = DP = 1, what
its card lists as native and reference is in plugins/train_megatron/README.md "What runs natively"); the fsdp engine
in this process. Writes ``$OUT/megatron_update_mfu.{json,md}`` with the ratio megatron / fsdp per shape (the issue's
gate: >= 0.8 on 1.5B).

Profile (``--profile``, on by default): after the timed updates each engine runs one more update under
``torch.profiler`` (CPU + CUDA) with its backend's ``forward`` / ``backward`` / ``reduce_and_clip`` / ``step`` timed by
CUDA events (time on the GPU's stream from the call's start to its end, summed over micro-batches): ``phases`` says
where an update's time goes (forward vs backward vs gradient norm vs optimizer step, and ``other``: the loss, batch
slicing, syncs), ``kernels`` the top 15 CUDA kernels by time and ``kernel_s`` their total (all kernels): an update much
longer than its kernels is launch- or sync-bound. Written to ``$OUT/profile_<shape>_<variant>.txt``.

Variants (``--variants``): ``fsdp``; ``megatron`` (the card's defaults); ``megatron-distopt``
(``train.distributed_optimizer=true``: megatron-core's DistributedOptimizer on a GPU, rl_train_megatron.dist_optimizer);
``megatron-unfused`` (the path before issue 49's kernel work: megatron-core's unfused DotProductAttention and linear
function, the whole-vocabulary log-probs, foreach AdamW: an A/B on the same machine).

On a GPU machine without megatron-core: ``pip install --no-deps --target /tmp/site`` its cp312 wheel (0.16.1) and run
with ``PYTHONPATH=/tmp/site:core:plugins/train_megatron:plugins/train_fsdp:plugins/testing`` (bench/DEVICE_RUNBOOK.md).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "bench"), str(REPO / "core"), str(REPO / "plugins" / "train_fsdp"), str(REPO / "plugins" / "train_megatron"),
                str(REPO / "plugins" / "testing")]

import attrs  # noqa: E402
import torch  # noqa: E402
import update_mfu_gpu as mfu  # noqa: E402

VARIANTS = ("fsdp", "megatron", "megatron-distopt", "megatron-unfused")
PHASES = {"forward": "forward", "backward": "backward", "reduce_and_clip": "grad norm + clip", "step": "optimizer step"}


def _cfg(path: Path, args, micro: int, dtype: str, variant: str):
    chunk = 0 if variant == "megatron-unfused" else 2048
    cfg = mfu.run_config(path, rows=args.rows, prompt=args.prompt, response=args.response, micro=micro, dtype=dtype, chunk=chunk, ckpt=False)
    train = attrs.evolve(cfg.train, name=variant.split("-")[0], distributed_optimizer=variant == "megatron-distopt")
    return attrs.evolve(cfg, train=train)


class Phases:
    """The backend's ``forward`` / ``backward`` / ``reduce_and_clip`` / ``step`` timed on the device's stream (CUDA
    events; wall time on the CPU), summed per phase, and marked as ``phase:<name>`` ranges in the profile."""

    def __init__(self, backend, device: str) -> None:
        self.device, self.marks, self.on = device, [], False
        for name in PHASES:
            setattr(backend, name, self._wrapped(getattr(backend, name), name))

    def _wrapped(self, fn, name: str):
        def timed(*a, **k):
            if not self.on:
                return fn(*a, **k)
            with torch.profiler.record_function(f"phase:{name}"):
                start = self._mark()
                try:
                    return fn(*a, **k)
                finally:
                    self.marks.append((name, start, self._mark()))
        return timed

    def _mark(self):
        if self.device == "cuda":
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        return time.perf_counter()

    def seconds(self) -> dict[str, float]:
        if self.device == "cuda":
            torch.cuda.synchronize()
        out = dict.fromkeys(PHASES, 0.0)
        for name, a, b in self.marks:
            out[name] += a.elapsed_time(b) / 1e3 if self.device == "cuda" else b - a
        return out


def profile_update(engine, batch, device: str) -> dict:
    """One more update under torch.profiler: its time, phases, top-15 kernels (CPU ops on the CPU) and their total."""
    from torch.profiler import ProfilerActivity, profile

    phases = Phases(engine.backend, device)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    phases.on = True
    with profile(activities=acts) as prof:
        t = mfu._timed(lambda: engine.update(batch, on_policy=True), device)
    phases.on = False
    spent = phases.seconds()
    spent["other"] = max(0.0, t - sum(spent.values()))
    events = prof.key_averages()
    if device == "cuda":
        from torch.autograd import DeviceType

        kern = [e for e in events if e.device_type == DeviceType.CUDA]
        time_of = lambda e: e.self_device_time_total  # noqa: E731
    else:  # the smoke run: the CPU's ops stand in for kernels
        kern = [e for e in events if not e.key.startswith(("phase:", "ProfilerStep", "Optimizer", "autograd::", "torch::autograd"))]
        time_of = lambda e: e.self_cpu_time_total  # noqa: E731
    kern.sort(key=time_of, reverse=True)
    table = events.table(sort_by="self_device_time_total" if device == "cuda" else "self_cpu_time_total", row_limit=40, max_name_column_width=70)
    if device == "cuda":  # where the CPU waits (cudaStreamSynchronize, pageable copies) and what it launches
        table += "\n\nCPU side:\n" + events.table(sort_by="self_cpu_time_total", row_limit=25, max_name_column_width=70)
    syncs = sum(e.count for e in events if e.key in ("aten::_local_scalar_dense", "cudaStreamSynchronize", "cudaDeviceSynchronize"))
    return {
        "profiled_update_s": t,
        "profiled_peak_gib": torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else float("nan"),
        "phases_s": spent,
        "kernel_s": sum(time_of(e) for e in kern) / 1e6,
        "host_syncs": syncs,
        "kernels": [{"name": e.key[:120], "s": time_of(e) / 1e6, "calls": e.count} for e in kern[:15]],
        "table": table,
    }


def run_variant(engine, batch, device: str, iters: int, profile: bool) -> dict:
    try:
        first = engine.update(batch, on_policy=True)  # from the same random init and batch in every variant: their numbers compare
        t, mem = mfu.measure(engine, batch, device, iters)
        out = {"update_s": t, "peak_gib": mem, "first_loss": float(first["loss"]), "first_grad_norm": float(first["grad_norm"])}
        if profile:
            out["profile"] = profile_update(engine, batch, device)
    except torch.OutOfMemoryError:
        return {"error": "out of memory"}
    return out


def run_megatron(rank: int, world: int, path: str, args, micro: int, dtype: str, device: str, vocab: int, variant: str = "megatron") -> dict:
    from rl_core.backends import WorkerContext
    from rl_train_megatron.engine import build_engine

    if variant == "megatron-unfused":  # the path before issue 49's kernel work (an A/B on the same machine)
        from rl_train_megatron import engine as meng
        from rl_train_megatron import linear
        from rl_train_megatron import model as mmodel

        mmodel.CORE_ATTENTION = "unfused"
        meng.FUSED_ADAMW = False
        linear.ENABLED = False
    if variant == "megatron-distopt":  # megatron-core's DistributedOptimizer (off in the engine until a device run verified it)
        from rl_train_megatron import dist_optimizer

        dist_optimizer.ENABLED = True
    ctx = WorkerContext(rank=rank, world_size=world, local_rank=rank, device=device, seed=0)
    engine = build_engine("actor", _cfg(Path(path), args, micro, dtype, variant), ctx)
    b = engine.backend
    out = {"optimizer": "megatron-core DistributedOptimizer" if b.native_optimizer is not None else
           f"{type(b.optimizer).__name__}" + (" (ZeRO-1: " + b.reference_optimizer + ")" if b.zero is not None else "")}
    try:
        out.update(run_variant(engine, mfu.step_batch(args.rows, args.prompt, args.response, vocab), device, args.iters, args.profile))
    finally:
        engine.shutdown()
    return out


def main() -> None:
    smoke = os.environ.get("SMOKE") == "1"
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=16 if smoke else 64)
    ap.add_argument("--prompt", type=int, default=16 if smoke else 128)
    ap.add_argument("--response", type=int, default=16 if smoke else 256)
    ap.add_argument("--iters", type=int, default=2)
    ap.add_argument("--plan", default=None, help="shape:micro ... (default '1.5b:8'; smoke 'tiny:4')")
    ap.add_argument("--variants", default="fsdp megatron megatron-distopt", help=f"any of {' '.join(VARIANTS)}")
    ap.add_argument("--profile", type=int, default=1, help="1: one more update per variant under torch.profiler (phases, top kernels)")
    args = ap.parse_args()
    variants = args.variants.split()
    if "fsdp" not in variants or any(v not in VARIANTS for v in variants):
        ap.error(f"--variants: fsdp and any of {' '.join(VARIANTS[1:])}")
    device = "cuda" if torch.cuda.is_available() and not smoke else "cpu"
    dtype = "bfloat16" if device == "cuda" else "float32"
    out_dir = Path(os.environ.get("OUT", "/tmp/out"))
    out_dir.mkdir(parents=True, exist_ok=True)
    from rl_core.backends import WorkerContext
    from rl_core_testing.distributed import run_distributed
    from rl_train_fsdp.engine import build_engine as fsdp_engine

    peak = mfu.matmul_peak(device)
    print(f"measured matmul peak: {peak / 1e12:.1f} TFLOP/s", flush=True)
    plan = args.plan or ("tiny:4" if smoke else "1.5b:8")
    root = Path(tempfile.mkdtemp(prefix="megatron_mfu_"))
    rows = []
    for shape, micro in ((s, int(m)) for s, m in (x.split(":") for x in plan.split())):
        vocab = 300 if shape == "tiny" else 50257
        path = mfu.model_dir(root, shape, vocab)
        flops = mfu.model_flops(shape, vocab, args.rows, args.prompt, args.response)
        tokens = args.rows * (args.prompt + args.response)
        engine = fsdp_engine("actor", _cfg(path, args, micro, dtype, "fsdp"), WorkerContext(device=device))
        results = {"fsdp": run_variant(engine, mfu.step_batch(args.rows, args.prompt, args.response, vocab), device, args.iters, args.profile)}
        del engine
        if device == "cuda":
            torch.cuda.empty_cache()
        for variant in variants[1:]:
            try:
                results[variant] = run_distributed(run_megatron, 1, str(path), args, micro, dtype, device, vocab, variant,
                                                   backend="nccl" if device == "cuda" else "gloo", timeout=900)[0]
            except Exception as exc:  # noqa: BLE001 - one variant failing leaves the others' rows
                results[variant] = {"error": f"{type(exc).__name__}: {str(exc)[-2000:]}"}
        for backend, r in results.items():
            prof = r.pop("profile", None)
            row = {"shape": shape, "backend": backend, "micro": micro, **r}
            if "update_s" in r:
                row.update(tokens_per_s=tokens / r["update_s"], tflops=flops / r["update_s"] / 1e12, mfu=flops / r["update_s"] / peak)
            if prof is not None:
                (out_dir / f"profile_{shape}_{backend}.txt").write_text(_profile_text(shape, backend, prof))
                row["profile"] = {k: v for k, v in prof.items() if k != "table"}
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "profile"}), flush=True)
            if prof is not None:
                print(_profile_text(shape, backend, prof, table=False), flush=True)
    info = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "command": ("SMOKE=1 " if smoke else "") + "python " + " ".join(sys.argv),
            "device": torch.cuda.get_device_name() if device == "cuda" else "cpu", "torch": torch.__version__, "matmul_peak_tflops": peak / 1e12,
            "rows": args.rows, "prompt": args.prompt, "response": args.response}
    ratios = {}
    for shape in dict.fromkeys(r["shape"] for r in rows):
        by = {r["backend"]: r for r in rows if r["shape"] == shape}
        for variant in variants[1:]:
            if "mfu" in by["fsdp"] and "mfu" in by.get(variant, {}):
                ratios[f"{shape} {variant}"] = by[variant]["mfu"] / by["fsdp"]["mfu"]
    (out_dir / "megatron_update_mfu.json").write_text(json.dumps({"info": info, "rows": rows, "megatron_over_fsdp": ratios}, indent=1))
    lines = [f"# actor update MFU, megatron vs fsdp: {info['device']}, {info['date']}", "", f"`{info['command']}`; torch {info['torch']}; "
             f"measured matmul peak {peak / 1e12:.0f} TFLOP/s; {args.rows} x ({args.prompt} + {args.response}) tokens per update", "",
             "| shape | backend | micro | update s | tokens/s | MFU | peak GiB |", "|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['shape']} | {r['backend']} | {r['micro']} | " + (f"{r['error'][:300]} | | | |" if "error" in r else
                     f"{r['update_s']:.3f} | {r['tokens_per_s']:,.0f} | {100 * r['mfu']:.1f}% | {r['peak_gib']:.1f} |"))
    lines += ["", "megatron / fsdp MFU: " + ", ".join(f"{s} {v:.2f}" for s, v in ratios.items())]
    lines += ["", "First update from the same init and batch (the variants must agree up to bf16 rounding): "
              + ", ".join(f"{r['shape']} {r['backend']} loss {r['first_loss']:.6f} grad_norm {r['first_grad_norm']:.6f}"
                          + (f" ({r['optimizer']})" if "optimizer" in r else "") for r in rows if "first_loss" in r)]
    profiled = [r for r in rows if "profile" in r]
    if profiled:
        names = list(PHASES) + ["other"]
        lines += ["", "Profiled update (one more, under torch.profiler; seconds on the device's stream per phase):", "",
                  "| shape | backend | update s | " + " | ".join(PHASES.get(n, n) for n in names) + " | all kernels s |",
                  "|---|---|---:|" + "---:|" * (len(names) + 1)]
        for r in profiled:
            p = r["profile"]
            lines.append(f"| {r['shape']} | {r['backend']} | {p['profiled_update_s']:.3f} | "
                         + " | ".join(f"{p['phases_s'][n]:.3f}" for n in names) + f" | {p['kernel_s']:.3f} |")
        lines += ["", "Top kernels per backend: profile_<shape>_<backend>.txt"]
    text = "\n".join(lines) + "\n"
    (out_dir / "megatron_update_mfu.md").write_text(text)
    print(text)


def _profile_text(shape: str, backend: str, prof: dict, table: bool = True) -> str:
    lines = [f"# {shape} {backend}: profiled update {prof['profiled_update_s']:.3f} s, kernels {prof['kernel_s']:.3f} s, "
             f"peak {prof['profiled_peak_gib']:.1f} GiB, host syncs {prof['host_syncs']}",
             "phases (s): " + ", ".join(f"{PHASES.get(k, k)} {v:.3f}" for k, v in prof["phases_s"].items()),
             "top kernels (s, calls):"]
    lines += [f"  {k['s']:8.4f} {k['calls']:6d}  {k['name']}" for k in prof["kernels"]]
    if table:
        lines += ["", prof["table"]]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
