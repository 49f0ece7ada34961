"""Where the GPU time goes: kernel times of the ``hf`` decode step and of one actor update (issue 13).

    python bench/profile_gpu.py                           # H100: decode (0.5B, batch 64) and update (1.5B, micro 16)
    python bench/profile_gpu.py --decode-modes graph,compile --update-variants eager,compile
    SMOKE=1 python bench/profile_gpu.py                   # CPU: a tiny model, checks the script runs (op times)

torch.profiler (CUPTI) over one ``generate`` of ``--new`` tokens (after a warm-up call that captures the
graph) and over one ``RoleEngine.update`` over ``FSDPBackend`` (after a warm-up update). Kernels are grouped by name into GEMM,
attention, optimizer, compiled (triton), norm / reduction, elementwise, copies and other; the table gives each
group's device time and share, the number of kernel launches, and the device-busy share of the wall time
(the rest is the GPU waiting for the host). Also the 15 costliest kernels. Writes ``$OUT/profile_gpu.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "core"), str(REPO / "plugins" / "train_fsdp"), str(REPO / "plugins" / "hf_decode"), str(REPO / "bench")]

import torch  # noqa: E402

GROUPS = (  # (group, substrings of the kernel name), first match wins
    ("optimizer", ("adam", "multi_tensor", "foreach")),
    ("attention", ("flash", "fmha", "attention", "sdpa", "efficient_attention")),
    ("gemm", ("gemm", "nvjet", "cutlass", "xmma", "cublas", "matmul", "addmm", "mm_", "splitk")),
    ("compiled (triton)", ("triton",)),
    ("norm / reduction", ("reduce", "norm", "softmax", "logsumexp", "cumsum", "scan", "sort", "topk")),
    ("copies", ("copy", "cat", "index", "gather", "scatter", "fill", "memcpy", "memset")),
    ("elementwise", ("elementwise", "vectorized", "unrolled", "pointwise")),
)


def group_of(name: str) -> str:
    low = name.lower()
    for group, keys in GROUPS:
        if any(k in low for k in keys):
            return group
    return "other"


def profile(fn, cuda: bool) -> dict:
    """Run ``fn`` once under the profiler; kernel (or, on CPU, op) times by group."""
    from torch.profiler import ProfilerActivity, profile as torch_profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    if cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch_profile(activities=acts) as prof:
        fn()
        if cuda:
            torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    kernels: dict[str, list[float]] = {}
    for ev in prof.events():
        if cuda:
            if ev.device_type != torch.autograd.DeviceType.CUDA:
                continue
            us = ev.device_time_total if hasattr(ev, "device_time_total") else ev.cuda_time_total
        else:
            if ev.cpu_parent is not None:  # top-level ops only on CPU (no double counting)
                continue
            us = ev.self_cpu_time_total
        k = kernels.setdefault(ev.name, [0.0, 0])
        k[0] += us
        k[1] += 1
    groups: dict[str, dict] = {}
    for name, (us, count) in kernels.items():
        g = groups.setdefault(group_of(name), {"us": 0.0, "launches": 0})
        g["us"] += us
        g["launches"] += count
    busy = sum(g["us"] for g in groups.values()) / 1e6
    top = sorted(((us, count, name) for name, (us, count) in kernels.items()), reverse=True)[:15]
    return {"wall_s": wall, "busy_s": busy, "groups": groups, "top": [{"us": us, "launches": c, "name": n[:140]} for us, c, n in top]}


def decode_case(args, device: str, mode: str):
    from decode_gpu import SHAPES, _Tok, build_model  # noqa: F401
    from rl_core.backends import SamplingParams, WorkerContext
    from rl_core.batch import Batch
    from rl_core.config.schema import DataConfig, ModelConfig, RolloutConfig, RunConfig
    from rl_core.rollout.hf import HFRolloutEngine
    from rl_hf_decode.feature import FEATURE

    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = build_model(args.decode_shape, args.vocab, device, dtype)
    kw = {"graph": {"compile": False}, "compile": {"compile": True}, "nopack": {"compile": False, "pack_projections": False},
          "eager": {"cuda_graph": False, "compile": False}}[mode]
    cfg = RunConfig(model=ModelConfig(path="unused", dtype="bfloat16" if device == "cuda" else "float32"), data=DataConfig(max_prompt_length=args.prompt),
                    rollout=RolloutConfig(engine_kwargs={"static_decode": True, **kw}))
    eng = HFRolloutEngine(cfg, WorkerContext(device=device, features={"hf_decode": FEATURE}), model=model, tokenizer=_Tok(args.vocab - 1))
    ids = torch.randint(0, args.vocab - 1, (args.batch // 8, args.prompt), generator=torch.Generator().manual_seed(0))
    batch = Batch({"input_ids": ids, "attention_mask": torch.ones_like(ids)}, {"uid": [str(i) for i in range(len(ids))]}, {})
    # warm-up at the profiled length: compile, and capture every capacity's graph the profiled call reaches
    eng.generate(batch, SamplingParams(n=8, max_new_tokens=args.new, temperature=1.0, seed=0))
    out = profile(lambda: eng.generate(batch, SamplingParams(n=8, max_new_tokens=args.new, temperature=1.0, seed=1)), device == "cuda")
    out["per_step_ms"] = 1000 * out["wall_s"] / args.new
    return out


def update_case(args, device: str, variant: str):
    import attrs
    from update_mfu_gpu import model_dir, run_config, step_batch
    from rl_core.backends import WorkerContext
    from rl_train_fsdp.engine import build_engine

    import tempfile

    root = Path(tempfile.mkdtemp(prefix="profile_"))
    path = model_dir(root, args.update_shape, args.vocab)
    cfg = run_config(path, rows=args.rows, prompt=args.prompt, response=args.response, micro=args.micro,
                     dtype="bfloat16" if device == "cuda" else "float32", chunk=2048, ckpt=False)
    if variant == "compile":
        cfg = attrs.evolve(cfg, model=attrs.evolve(cfg.model, compile=True))
    engine = build_engine("actor", cfg, WorkerContext(device=device))
    if variant == "foreach":  # the optimizer before this session's change, for comparison
        o = engine.optimizer
        engine.backend.optimizer = torch.optim.AdamW(o.param_groups[0]["params"], lr=o.defaults["lr"], betas=o.defaults["betas"], eps=o.defaults["eps"],
                                             weight_decay=o.defaults["weight_decay"], foreach=True)
        engine._scheduler = None
    batch = step_batch(args.rows, args.prompt, args.response, args.vocab)
    on_policy = "old_log_probs" not in batch.tensors.keys()  # no old log-prob pass: one mini-batch, as the loop does
    engine.update(batch, on_policy=on_policy)  # warm-up (and compilation)
    out = profile(lambda: engine.update(batch, on_policy=on_policy), device == "cuda")
    del engine
    if device == "cuda":
        torch.cuda.empty_cache()
    return out


def table(title: str, r: dict) -> list[str]:
    lines = [f"### {title}", "", f"wall {r['wall_s'] * 1000:.1f} ms, device busy {r['busy_s'] * 1000:.1f} ms "
             f"({100 * r['busy_s'] / r['wall_s']:.0f}% of the wall time)" + (f"; {r['per_step_ms']:.2f} ms per decode step" if "per_step_ms" in r else ""), "",
             "| group | device ms | share | launches |", "|---|---:|---:|---:|"]
    for g, v in sorted(r["groups"].items(), key=lambda kv: -kv[1]["us"]):
        lines.append(f"| {g} | {v['us'] / 1000:.1f} | {100 * v['us'] / 1e6 / max(r['busy_s'], 1e-9):.0f}% | {v['launches']} |")
    lines += ["", "<details><summary>15 costliest kernels</summary>", "", "| device ms | launches | kernel |", "|---:|---:|---|"]
    lines += [f"| {t['us'] / 1000:.2f} | {t['launches']} | `{t['name']}` |" for t in r["top"]]
    return lines + ["", "</details>", ""]


def main() -> None:
    smoke = os.environ.get("SMOKE") == "1"
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--decode-modes", default="graph")
    ap.add_argument("--update-variants", default="eager")
    ap.add_argument("--decode-shape", default="tiny" if smoke else "0.5b")
    ap.add_argument("--update-shape", default="tiny" if smoke else "1.5b")
    ap.add_argument("--vocab", type=int, default=300 if smoke else 50257)
    ap.add_argument("--batch", type=int, default=16 if smoke else 64)
    ap.add_argument("--new", type=int, default=8 if smoke else 64)
    ap.add_argument("--rows", type=int, default=16 if smoke else 64)
    ap.add_argument("--micro", type=int, default=8 if smoke else 16)
    ap.add_argument("--prompt", type=int, default=16 if smoke else 128)
    ap.add_argument("--response", type=int, default=16 if smoke else 256)
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() and not smoke else "cpu"
    out_dir = Path(os.environ.get("OUT", "/tmp/out"))
    out_dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict] = {}
    for mode in filter(None, args.decode_modes.split(",")):
        name = f"decode {args.decode_shape}, batch {args.batch}, {mode}"
        try:
            results[name] = decode_case(args, device, mode)
        except Exception as exc:  # noqa: BLE001 - report and go on
            results[name] = {"error": f"{type(exc).__name__}: {exc}"[:400]}
        print(name, json.dumps({k: v for k, v in results[name].items() if k != "top"})[:600], flush=True)
    for variant in filter(None, args.update_variants.split(",")):
        name = f"update {args.update_shape}, {args.rows} x ({args.prompt} + {args.response}), micro {args.micro}, {variant}"
        try:
            results[name] = update_case(args, device, variant)
        except Exception as exc:  # noqa: BLE001
            results[name] = {"error": f"{type(exc).__name__}: {exc}"[:400]}
        print(name, json.dumps({k: v for k, v in results[name].items() if k != "top"})[:600], flush=True)
    info = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "command": ("SMOKE=1 " if smoke else "") + "python " + " ".join(sys.argv),
            "device": torch.cuda.get_device_name() if device == "cuda" else "cpu", "torch": torch.__version__}
    (out_dir / "profile_gpu.json").write_text(json.dumps({"info": info, "results": results}, indent=1))
    lines = [f"# Kernel time breakdown: {info['device']}, {info['date']}", "", f"`{info['command']}`; torch {info['torch']}", ""]
    for name, r in results.items():
        lines += [f"### {name}", "", f"failed: {r['error']}", ""] if "error" in r else table(name, r)
    (out_dir / "profile_gpu.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
