"""`rlcore doctor [--nprocs N] [--json] [--cluster]` (rl-doctor's command): what this machine has, and whether its
collectives work.

Prints the versions of Python, torch (with CUDA / NCCL), transformers and the other libraries rl-core
uses; every installed plugin and the engine each backend needs (with load errors); the devices and their
memory; whether gloo (and NCCL, with GPUs) initialise; and an all-reduce across N local processes with
its latency (a 4-byte tensor) and bus bandwidth (a 64 MiB tensor, ``2 (N-1) / N x bytes / time``, as
nccl-tests reports it). Exits 1 when a plugin fails to load or a collective fails.

``--cluster`` hands over to the cluster check of the installed placement plugins (a ``PlacementCard``'s ``doctor``:
rl-placement-ray's checks a Ray cluster).
"""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import platform
import statistics
import sys
import time
from typing import Any
from rl_core.cards import CARD_TYPES, load_object
from rl_core.problems import UserError
from rl_core.util.precision import cpu_bf16_support, cpu_capability

LIBRARIES = ("rl-core", "torch", "transformers", "accelerate", "tensordict", "pluggy", "attrs", "numpy", "pyarrow", "safetensors", "tokenizers", "ray")
LATENCY_BYTES = 4
BANDWIDTH_BYTES = 64 * 2**20
REPEATS = 10


def add_parser(sub) -> None:
    p = sub.add_parser("doctor", help="versions, plugins, devices, and a local all-reduce test (latency, bandwidth)")
    p.add_argument("--nprocs", type=int, default=None, metavar="N", help="processes for the all-reduce test (default: 2 for gloo, one per GPU for NCCL)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--no-collectives", action="store_true", help="skip the process-group and all-reduce tests")
    p.add_argument("--cluster", action="store_true", help="check a Ray cluster instead (needs rl-placement-ray)")
    p.add_argument("--address", default=None, help="with --cluster: the Ray cluster's address (default: $RAY_ADDRESS, else the local one)")
    p.set_defaults(func=run)


def _version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def versions() -> dict[str, Any]:
    import torch

    out: dict[str, Any] = {"python": f"{platform.python_version()} ({sys.executable})", "platform": platform.platform()}
    for lib in LIBRARIES:
        out[lib] = _version(lib) or "not installed"
    out["torch CUDA"] = torch.version.cuda or "none (CPU build)"
    if torch.cuda.is_available():
        try:
            out["NCCL"] = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception as exc:  # noqa: BLE001
            out["NCCL"] = f"unavailable ({exc})"
        out["cuDNN"] = str(torch.backends.cudnn.version())
    return out


def plugins() -> dict[str, Any]:
    from rl_core.plugins import get_registry

    reg = get_registry()
    engines = []
    for kind in ("rollout", "train"):
        for name in reg.names(kind):
            card = reg.cards[kind][name]
            dists = [d.strip() for d in (card.engine or "").split("|") if d.strip()]
            found = next(((d, v) for d in dists if (v := _version(d))), None)
            engines.append({
                "backend": f"{kind} {name}",
                "provider": str(card.provider or ""),
                "engine": f"{found[0]} {found[1]}" if found else ("built in" if not dists else f"{' or '.join(dists)}: not installed"),
                "tested": card.engine_versions or "",
            })
    return {
        "plugins": [f"{p.get('distribution', '?')} {p.get('version', '')} ({p.get('entry_point', '')})" if isinstance(p, dict) else str(p) for p in reg.plugins],
        "cards": {kind: reg.names(kind) for kind in CARD_TYPES},
        "engines": engines,
        "errors": [e.describe() for e in reg.errors] + [c.describe() for c in reg.conflicts],
    }


def devices() -> dict[str, Any]:
    import torch

    from rl_core.plan.memory import device_memory

    ram = device_memory("cpu")
    out: dict[str, Any] = {"cpu": f"{os.cpu_count()} cores, {ram / 2**30:.1f} GiB RAM" if ram else f"{os.cpu_count()} cores"}
    bf16 = cpu_bf16_support()
    out["cpu"] += f"; kernels for {cpu_capability()}, " + (
        f"bfloat16 in hardware ({bf16})" if bf16 else "no bfloat16 hardware (model.dtype auto -> float32 on the CPU)"
    )
    from rl_core.util.console import busy_cpu_warning, cpu_load

    load = cpu_load()
    if load is not None:
        out["cpu_load"] = f"load average {load[0]:.1f} (1 min) on {load[1]} usable core{'s' if load[1] > 1 else ''}"
        busy = busy_cpu_warning()
        out["cpu_load"] += f"; warning: {busy}" if busy else ": idle enough"
    gpus = []
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            free, total = torch.cuda.mem_get_info(i)
            gpus.append(f"cuda:{i} {props.name}, {total / 2**30:.1f} GiB ({free / 2**30:.1f} GiB free), compute capability {props.major}.{props.minor}")
    out["gpus"] = gpus or ["none visible to torch"]
    return out


def _allreduce_rank(rank: int, world: int, device: str) -> dict[str, float]:
    """Runs in each spawned process (the process group is already up): all-reduce latency and bandwidth."""
    import torch
    import torch.distributed as dist

    if device == "cuda":
        torch.cuda.set_device(rank)
    dev = torch.device(device, rank) if device == "cuda" else torch.device("cpu")

    def timed(numel: int) -> float:
        x = torch.ones(numel, dtype=torch.float32, device=dev)
        dist.all_reduce(x)  # warm-up (connection set-up)
        if device == "cuda":
            torch.cuda.synchronize()
        times = []
        for _ in range(REPEATS):
            dist.barrier()
            start = time.perf_counter()
            dist.all_reduce(x)
            if device == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
        assert float(x[0]) == float(world) ** (REPEATS + 1), "all-reduce gave a wrong sum"
        return statistics.median(times)

    lat = timed(LATENCY_BYTES // 4)
    big = timed(BANDWIDTH_BYTES // 4)
    return {"latency_s": lat, "time_s": big, "busbw": 2 * (world - 1) / world * BANDWIDTH_BYTES / big if world > 1 else 0.0}


def collectives(nprocs: int | None) -> list[dict[str, Any]]:
    import torch

    from rl_doctor.local_group import run_on_local_group

    results = []
    backends = [("gloo", "cpu")] + ([("nccl", "cuda")] if torch.cuda.is_available() and torch.distributed.is_nccl_available() else [])
    for backend, device in backends:
        n = min(nprocs or torch.cuda.device_count(), torch.cuda.device_count()) if device == "cuda" else (nprocs or 2)
        start = time.perf_counter()
        try:
            per_rank = run_on_local_group(_allreduce_rank, n, device, backend=backend, timeout=180.0)
        except Exception as exc:  # noqa: BLE001 - a failing collective is the finding
            results.append({"backend": backend, "processes": n, "ok": False, "error": f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else ''}"})
            continue
        results.append({
            "backend": backend,
            "processes": n,
            "ok": True,
            "wall_s": time.perf_counter() - start,
            "latency_ms": max(r["latency_s"] for r in per_rank) * 1e3,
            "busbw_GBps": min(r["busbw"] for r in per_rank) / 1e9,
            "bytes": BANDWIDTH_BYTES,
        })
    if not torch.cuda.is_available():
        results.append({"backend": "nccl", "ok": None, "error": "skipped: no GPU"})
    return results


def _print(report: dict[str, Any]) -> None:
    print("rl-core doctor")
    print("versions:")
    for k, v in report["versions"].items():
        print(f"  {k:<14} {v}")
    p = report["plugins"]
    print("plugins:")
    for name in p["plugins"]:
        print(f"  {name}")
    print("backends and their engines:")
    for e in p["engines"]:
        tested = f" (tested: {e['tested']})" if e["tested"] else ""
        print(f"  {e['backend']:<16} {e['engine']}{tested}  [{e['provider']}]")
    for err in p["errors"]:
        print(f"  error: {err}")
    print("devices:")
    print(f"  cpu            {report['devices']['cpu']}")
    if report["devices"].get("cpu_load"):
        print(f"  cpu load       {report['devices']['cpu_load']}")
    for g in report["devices"]["gpus"]:
        print(f"  gpu            {g}")
    if "collectives" in report:
        print("collectives (all-reduce across local processes):")
        for c in report["collectives"]:
            if c.get("ok"):
                bw = f"bus bandwidth {c['busbw_GBps']:.2f} GB/s ({c['bytes'] // 2**20} MiB)" if c["processes"] > 1 else "no bandwidth with one process"
                print(f"  {c['backend']:<5} ok, {c['processes']} process(es): latency {c['latency_ms']:.3f} ms (4 B), {bw}; {c['wall_s']:.1f} s incl. start-up")
            elif c.get("ok") is None:
                print(f"  {c['backend']:<5} {c['error']}")
            else:
                print(f"  {c['backend']:<5} FAILED ({c.get('processes', '?')} processes): {c['error']}")


def cluster_doctor(args) -> int:
    """``--cluster``: the ``doctor`` of every installed placement card that has one (rl-placement-ray's: a Ray cluster)."""
    from rl_core.plugins import get_registry

    cards = [c for c in get_registry().cards["placement"].values() if c.doctor is not None]
    if not cards:
        print("error: `rlcore doctor --cluster` checks a Ray cluster, and no installed placement has a cluster check: "
              "pip install rl-placement-ray (`rlcore doctor` without --cluster checks this machine)", file=sys.stderr)
        return 1
    return max(int(load_object(c.doctor)(args) or 0) for c in sorted(cards, key=lambda c: c.name))


def run(args) -> int:
    if args.cluster:
        return cluster_doctor(args)
    if args.nprocs is not None and args.nprocs < 1:
        raise UserError(f"--nprocs must be >= 1, got {args.nprocs}")

    report: dict[str, Any] = {"versions": versions(), "plugins": plugins(), "devices": devices()}
    if not args.no_collectives:
        report["collectives"] = collectives(args.nprocs)  # None: 2 gloo processes, one NCCL process per GPU
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        _print(report)
    failed = report["plugins"]["errors"] or any(c.get("ok") is False for c in report.get("collectives", []))
    return 1 if failed else 0
