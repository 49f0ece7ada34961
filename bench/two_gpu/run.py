"""Issue #36's two-GPU runs (one H100 pair, NCCL), one ``--part`` per device command of <= 10 minutes.

    python bench/two_gpu/run.py --part async --out $OUT        # transfer probe, then colocated / split s1 / s1 overlapped / s0
    python bench/two_gpu/run.py --part learn --model builtin:smollm2 --train FILE --val FILE --out $OUT   # 3 seeds x 2 schedules
    python bench/two_gpu/run.py --part sp --sp 2 --out $OUT    # Ulysses SP 2 on both GPUs, 1.5B, 128 + 16,384 tokens
    CUDA_VISIBLE_DEVICES=0 python bench/two_gpu/run.py --part sp --sp 1 --out $OUT   # the SP 1 baseline on one GPU
    python bench/two_gpu/run.py --part all --tiny --out /tmp/two_gpu_tiny                    # CPU smoke (gloo, 2 processes)

bench/two_gpu/RUNBOOK.md has each device call (carry, command, expected time) and the prediction. Parts:

- ``nccl``: the weight transfer alone (rl_async.transfer.TransferGroup, rank 0 on GPU 0, rank 1 on GPU 1,
  ~1 GiB three times, the 3rd sent from a thread as async.overlap_sync does; received tensors compared);
  ``async`` runs it first (``--no-probe`` skips it) and, if it fails, runs only the colocated placement.
- ``async``: the reference workload (bench/reference/grpo_reference.yaml: 0.5B shape, GPT-2 vocabulary, random bf16
  weights, 8 prompts x 8, 128 + 256 tokens, coin reward, one update per rollout, hf rollout, fsdp, model.compile) in
  four placements on the two GPUs: ``colocated`` (both GPUs, data-parallel 2, rollout and training in turn),
  ``split_s1``, ``split_s1_ov`` (the sync sent from a thread while training goes on: async.overlap_sync) and
  ``split_s0`` (rollout pool on GPU 1, train pool on GPU 0, the NCCL weight transfer, async.max_staleness 1 / 0).
  All run the same algorithm: rollout log-probs + token-level TIS (needed to correct staleness 1; so every run
  has the old-log-prob pass). Per run: medians over the steps after ``--skip`` (compilation) of the step, its
  stages, ``timing_s/sync_weights`` (+ ``timing_s/sync_receive`` when overlapped), the GPU-idle share of each pool.
- ``learn``: held-out accuracy per step, synchronous colocated vs split pools at staleness 1, 3 seeds, on a
  quickstart-sized task (examples/quickstart.yaml's settings, on CUDA) from a model and train / val files; the
  six runs share the two GPUs at once (``--concurrent``).
- ``sp``: Ulysses SP on bench/long_context/gpu_long.py's row ``r16k`` (1.5B shape, 8 prompts x 4, 128 + 16,384
  tokens); ``--sp 2`` on both GPUs, ``--sp 1`` the one-GPU baseline. Tokens/s (whole step and the update alone)
  and the peak memory per GPU.

``--deadline`` (default 560 s on GPUs, counted from ``$CALL_START`` when the command sets it) cuts every run's
timeout to the call's time left and skips a run that would not get its part's minimum: a call ends inside its
10 minutes. Every run is a ``rlcore train`` subprocess (its output in a log, its metrics.jsonl kept); after each
run the part's table (``<part>.md``), its numbers (``<part>.results.json``) and its raw files (``<part>_raw.tgz``:
metrics, configs, log tails) are rewritten under ``--out``, so a call killed at its limit still returns what
finished. Progress lines go to stdout.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
REFERENCE = ROOT / "bench" / "reference" / "grpo_reference.yaml"
QUICKSTART = ROOT / "examples" / "quickstart.yaml"

# the same algorithm in every placement: rollout log-probs + token TIS (staleness 1 needs the correction)
ALGORITHM = ["rollout.calculate_log_probs=true", "algorithm.rollout_correction.rollout_is=token"]
PLACEMENTS = {  # name: (overrides, GPUs of the train pool, GPUs of the rollout pool or None when colocated)
    # data-parallel 2: each rank micro-batches its 32 sequences in one pass, as the one-GPU run does its 64
    "colocated": (["trainer.n_gpus_per_node=2", "actor.ppo_micro_batch_size_per_gpu=32"], 2, None),
    # overlap_sync named in every split run (its default differs: on for CPU runs, off on GPUs), so the CPU smoke
    # runs the same schedules as the GPUs
    "split_s1": (["trainer.n_gpus_per_node=1", "rollout.n_gpus_per_node=1", "async.max_staleness=1", "async.overlap_sync=false"], 1, 1),
    # the sync sent from a thread while the train pool goes on; received by the rollout pool with its next request
    "split_s1_ov": (["trainer.n_gpus_per_node=1", "rollout.n_gpus_per_node=1", "async.max_staleness=1", "async.overlap_sync=true"], 1, 1),
    "split_s0": (["trainer.n_gpus_per_node=1", "rollout.n_gpus_per_node=1", "async.max_staleness=0", "async.overlap_sync=false"], 1, 1),
}
TINY_SETS = ("trainer.n_gpus_per_node", "actor.ppo_micro_batch_size_per_gpu")  # the tiny config sets its own
TRAIN_STAGES = ("old_log_prob", "ref", "values", "update_critic", "update_actor")
SHOWN_STAGES = ("gen", "gen_rollout", "old_log_prob", "update_actor", "gen_overlap_wait", "sync_weights", "sync_receive")


# --------------------------------------------------------------------------- deadline
class Deadline:
    """The device call's clock: every run's timeout is cut to what is left of ``--deadline`` seconds, counted from
    ``$CALL_START`` (epoch seconds: the command sets it before the install) or from this script's start; a run that
    would get less than its part's minimum is skipped and its table row says so. A device call must end well inside
    its 10 minutes: what is under $OUT comes back even when the call is killed, but a killed call's table lacks
    the last run."""

    def __init__(self, seconds: float | None) -> None:
        start = float(os.environ.get("CALL_START", "0") or 0) or time.time()
        self.at = None if not seconds else start + seconds

    def left(self) -> float:
        return float("inf") if self.at is None else self.at - time.time()

    def timeout(self, wanted: float, minimum: float) -> float | None:
        """The run's timeout, or None: not enough time left for ``minimum`` seconds (skip it)."""
        left = self.left() - 15  # the table and the raw archive are written after the run
        return None if left < minimum else min(wanted, left)


def skipped(name: str, why: str) -> dict:
    print(f"  {name}: skipped ({why})", flush=True)
    return {"name": name, "rc": f"skipped: {why}", "seconds": 0.0, "rows": [], "log_tail": [], "command": ""}


# --------------------------------------------------------------------------- running
def run_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               # NVLink multicast off (the device tool's KINDS.md); NCCL bound to loopback for its bootstrap
               NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1")
    env.setdefault("NCCL_SOCKET_IFNAME", "lo")
    env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    return env


def read_rows(path: Path) -> list[dict]:
    """A run's metrics.jsonl so far (gpu_long.metric_rows: a line being written when the run was stopped is skipped)."""
    return gpu_long().metric_rows(path)


def train(name: str, config: Path, overrides: list[str], out_dir: Path, timeout_s: float | None, *, stop_after: int | None = None) -> dict:
    """One ``rlcore train`` run; its metrics rows (also when it failed or timed out), exit code and seconds.

    ``stop_after``: once that many steps' metrics are written the run is stopped (SIGKILL of its process group: the
    final model's write and the shutdown are not waited for; the exit is then reported as ``done``). ``timeout_s``
    None: no time left before the call's deadline (the run is skipped)."""
    if timeout_s is None:
        return skipped(name, "the call's --deadline leaves too little time")
    return finish(start_train(name, config, overrides, out_dir), timeout_s, stop_after=stop_after)


def start_train(name: str, config: Path, overrides: list[str], out_dir: Path, env: dict | None = None) -> dict:
    """Start one ``rlcore train`` run in its own process group (:func:`finish` follows it)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    log = out_dir / "train.log"
    cmd = [sys.executable, "-m", "rl_core", "train", str(config), "--no-progress", f"trainer.output_dir={out_dir}", *overrides]
    print(f"[{time.strftime('%H:%M:%S')}] {name}: {' '.join(cmd[2:])}", flush=True)
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, cwd=ROOT, env={**run_env(), **(env or {})}, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
    return {"name": name, "proc": proc, "start": time.time(), "seen": 0, "out_dir": out_dir, "rc": None,
            "command": " ".join(["python", "-m", "rl_core", "train", str(config), *overrides])}


def poll(run: dict, timeout_s: float, stop_after: int | None) -> bool:
    """One look at a started run: progress lines for its new steps; stops it when done / over time. True: ended."""
    name, proc, out_dir = run["name"], run["proc"], run["out_dir"]
    rc = proc.poll()
    rows = [r for r in read_rows(out_dir / "metrics.jsonl") if "timing_s/step" in r]
    for r in rows[run["seen"]:]:  # one progress line per finished step
        print(f"  {name} step {r.get('step')}: {r['timing_s/step']:.2f} s (gen {r.get('timing_s/gen', float('nan')):.2f}, "
              f"update {r.get('timing_s/update_actor', float('nan')):.2f}, sync {r.get('timing_s/sync_weights', float('nan')):.3f})"
              + (f" val {r['val/accuracy']:.2f}" if "val/accuracy" in r else ""), flush=True)
    run["seen"] = len(rows)
    if rc is None:
        if stop_after is not None and run["seen"] >= stop_after:
            rc = "done"
        elif time.time() - run["start"] > timeout_s:
            rc = "timeout"
        if rc is not None:
            os.killpg(proc.pid, 9)  # the run and its workers (its own process group); not SIGTERM: it would save first
            proc.wait()
    if rc is None:
        return False
    run["rc"] = rc
    return True


def finish(run: dict, timeout_s: float, *, stop_after: int | None = None) -> dict:
    while not poll(run, timeout_s, stop_after):
        time.sleep(2)
    return result(run)


def result(run: dict) -> dict:
    name, rc, out_dir = run["name"], run["rc"], run["out_dir"]
    log = out_dir / "train.log"
    seconds = time.time() - run["start"]
    tail = log.read_text(errors="replace").splitlines()[-40:]
    if rc not in (0, "done"):
        print(f"  {name}: exit {rc} after {seconds:.0f} s; log tail:\n    " + "\n    ".join(tail[-15:]), flush=True)
    else:
        print(f"  {name}: {rc} in {seconds:.0f} s", flush=True)
    return {"name": name, "rc": rc, "seconds": seconds, "rows": read_rows(out_dir / "metrics.jsonl"), "log_tail": tail, "command": run["command"]}


class Part:
    """A part's results: ``<part>.md`` and ``<part>_raw.tgz`` under ``out``, rewritten after every run."""

    def __init__(self, out: Path, name: str, header: str) -> None:
        self.out, self.name, self.header = out, name, header
        self.runs: list[dict] = []
        self.lines: list[str] = []
        out.mkdir(parents=True, exist_ok=True)

    def add(self, run: dict, files: dict[str, Path] | None = None) -> None:
        run = dict(run)
        run["files"] = {k: str(v) for k, v in (files or {}).items()}
        self.runs.append(run)
        self.write()

    def write(self) -> None:
        (self.out / f"{self.name}.md").write_text(self.header + "\n\n" + "\n".join(self.lines) + "\n")
        summary = [{k: v for k, v in r.items() if k not in ("rows", "proc")} for r in self.runs]
        (self.out / f"{self.name}.results.json").write_text(json.dumps({"part": self.name, "runs": summary}, indent=1, default=str))
        with tarfile.open(self.out / f"{self.name}_raw.tgz", "w:gz") as tar:
            _add_bytes(tar, "summary.json", json.dumps(summary, indent=1, default=str).encode())
            for r in self.runs:
                _add_bytes(tar, f"{r['name']}.metrics.jsonl", "".join(json.dumps(x) + "\n" for x in r["rows"]).encode())
                for label, path in r["files"].items():
                    if Path(path).exists():
                        tar.add(path, arcname=f"{r['name']}.{label}")


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime = len(data), int(time.time())
    tar.addfile(info, io.BytesIO(data))


def med(values: list[float]) -> float:
    values = [v for v in values if v == v]
    return statistics.median(values) if values else float("nan")


def timed_rows(rows: list[dict], skip: int) -> list[dict]:
    steps = [r for r in rows if "timing_s/step" in r]
    return steps[skip:] or steps[-1:]


# --------------------------------------------------------------------------- nccl probe
def _probe_member(rank: int, address: str, device: str, total_mb: int, queue) -> None:
    """One member of the probe: rank 0 sends the same tensors twice (the first also sets up NCCL), rank 1 receives
    and compares them with its own copy (same seed)."""
    try:
        import torch

        from rl_async.transfer import TransferGroup

        group = TransferGroup(address, rank, 2, timeout_s=60, device=device)

        def tensors():
            g = torch.Generator(device="cpu").manual_seed(1234)
            n = total_mb * 2**20 // 4 // 3  # three tensors of ~total/3 bytes each (fp32 elements)
            yield "w.float32", torch.randn(n, generator=g).to(group.device)
            yield "w.bfloat16", torch.randn(2 * n, generator=g).to(torch.bfloat16).to(group.device)
            yield "w.int64", torch.randint(0, 1000, (n // 2,), generator=g).to(group.device)
            yield "w.empty", torch.empty(0, device=group.device)

        data = list(tensors()) if rank == 0 else None  # made before the clock starts: the time is the transfer's
        times = []
        for i in range(3):  # the 3rd is sent from a thread (send_in_background: async.overlap_sync's path)
            if group.device.type == "cuda":
                torch.cuda.synchronize(group.device)
            t0 = time.perf_counter()
            if rank == 0:
                if i < 2:
                    sent = group.send(iter(data), bucket_bytes=256 * 2**20)
                else:
                    group.send_in_background(iter(data), bucket_bytes=256 * 2**20)
                    group.wait_sent(60)
            else:
                got = dict(group.receive())
                if i == 0:
                    first = got
            if group.device.type == "cuda":
                torch.cuda.synchronize(group.device)
            times.append(time.perf_counter() - t0)
        result = {"rank": rank, "device": str(group.device), "seconds": times}
        if rank == 0:
            result["bytes"] = sent[1]
        else:
            want = dict(tensors())
            result["equal"] = all(list(g) == list(want) and all(torch.equal(g[k], want[k]) for k in want) for g in (first, got))
        group.close()
        queue.put(result)
    except BaseException as exc:  # noqa: BLE001 - reported by the parent
        import traceback

        queue.put({"rank": rank, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-2000:]})


def part_nccl(args) -> bool:
    """The weight transfer alone, before any trainer: rank 0 on GPU 0 (cpu with --tiny), rank 1 on GPU 1, gloo or
    NCCL as the trainer's split pools use it (rl_async.transfer.TransferGroup); ~1 GiB twice, checked."""
    import multiprocessing as mp

    from rl_core.placement.rendezvous import Rendezvous

    total_mb = 8 if args.tiny else 1024
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    opened = Rendezvous(None)
    env_before = {k: os.environ.get(k) for k in ("NCCL_NVLS_ENABLE", "NCCL_SOCKET_IFNAME")}
    os.environ.update({k: v for k, v in run_env().items() if k.startswith(("NCCL_", "TORCH_", "NVSHMEM_"))})
    procs = [ctx.Process(target=_probe_member, args=(r, opened.address, "cpu" if args.tiny else f"cuda:{r}", total_mb, queue)) for r in (0, 1)]
    start = time.time()
    for proc in procs:
        proc.start()
    results = []
    while len(results) < 2 and time.time() - start < 150:
        try:
            results.append(queue.get(timeout=5))
        except Exception:  # noqa: BLE001 - queue.Empty: check the members are alive
            if not all(p.is_alive() for p in procs) and queue.empty():
                break
    for proc in procs:
        proc.join(10)
        if proc.is_alive():
            proc.kill()
    opened.close()
    for k, v in env_before.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    results.sort(key=lambda r: r["rank"])
    ok = len(results) == 2 and not any("error" in r for r in results) and results[1].get("equal")
    lines = ["# The weight transfer alone: TransferGroup between two processes (issue #36)", "",
             f"`python bench/two_gpu/run.py --part nccl{' --tiny' if args.tiny else ''}`: rank 0 sends ~{total_mb} MiB "
             "(float32, bfloat16, int64 and an empty tensor; 256 MiB buckets) three times (the 3rd from a thread, as async.overlap_sync sends), "
             "rank 1 receives and compares the 1st and 3rd with its own copy. "
             "The first transfer also sets up the communicator.", "",
             f"verdict: {'OK' if ok else 'FAILED'}", ""]
    for r in results:
        lines.append(f"- rank {r['rank']}: " + (r["error"] + "\n\n```\n" + r["traceback"] + "\n```" if "error" in r else
                     f"{r['device']}, seconds {', '.join(f'{t:.3f}' for t in r['seconds'])} (1st sets up the communicator; 3rd sent from a thread)"
                     + (f", {r['bytes'] / 2**30:.2f} GiB sent, {r['bytes'] / 2**30 / r['seconds'][1]:.1f} GiB/s (2nd)" if "bytes" in r else "")
                     + (f", received equal: {r['equal']}" if "equal" in r else "")))
    if len(results) < 2:
        lines.append(f"- {2 - len(results)} member(s) reported nothing within 150 s (exit codes {[p.exitcode for p in procs]})")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "nccl.md").write_text("\n".join(lines) + "\n")
    (args.out / "nccl.results.json").write_text(json.dumps({"part": "nccl", "ok": bool(ok), "members": results}, indent=1, default=str))
    print("\n".join(lines), flush=True)
    return bool(ok)


# --------------------------------------------------------------------------- async
def stage_medians(rows: list[dict], rollout_pool: bool) -> dict[str, float]:
    """Medians of the step, its stages and each pool's GPU-idle share (per step: 1 - busy / step).

    Busy: colocated, both GPUs run generation, the train passes and the in-process sync in turn; split pools, the
    train GPU runs the train passes (old log-probs, update, ...) and the rollout GPU the generation (measured in the
    rollout process, ``timing_s/gen_rollout``); both take part in the transfer (``timing_s/sync_weights``)."""
    out = {k: med([r.get(f"timing_s/{k}", 0.0 if k != "sync_receive" else float("nan")) for r in rows]) for k in ("step", *SHOWN_STAGES)}
    idle_train, idle_rollout = [], []
    for r in rows:
        step = r["timing_s/step"]
        train = sum(r.get(f"timing_s/{k}", 0.0) for k in TRAIN_STAGES) + r.get("timing_s/sync_weights", 0.0)
        if rollout_pool:  # overlapped sync: the rollout side's receive + load + check is timing_s/sync_receive
            rollout = r.get("timing_s/gen_rollout", 0.0) + r.get("timing_s/sync_receive", r.get("timing_s/sync_weights", 0.0))
        else:
            train += r.get("timing_s/gen", 0.0)
            rollout = train
        idle_train.append(max(0.0, 1 - train / step))
        idle_rollout.append(max(0.0, 1 - rollout / step))
    out["idle_train"], out["idle_rollout"] = med(idle_train), med(idle_rollout)
    out["tokens_s"] = med([r.get("perf/throughput_tokens_per_s", float("nan")) for r in rows])
    out["peak_gb"] = med([r.get("perf/max_memory_allocated_gb", float("nan")) for r in rows])
    return out


def part_async(args) -> None:
    if not args.no_probe and not part_nccl(args):
        print("the transfer probe failed (nccl.md): the split-pool runs would fail the same way; the colocated run goes on", flush=True)
        args.placements = "colocated"
    part = Part(args.out, "async", "# Split rollout / train pools vs colocated on two GPUs (issue #36)\n\n"
                f"`python bench/two_gpu/run.py --part async{' --tiny' if args.tiny else ''} --steps {args.steps} --skip {args.skip}`; "
                "the reference workload (bench/reference/grpo_reference.yaml) with rollout log-probs + token TIS in every run. "
                f"Medians over steps {args.skip + 1}..{args.steps} (the first {args.skip} compile). idle = 1 - busy / step per pool "
                "(split: train GPU busy = old_log_prob + update + sync, rollout GPU busy = generation in the rollout process + sync "
                "(overlapped sync, split_s1_ov: + the receive); "
                "colocated: both GPUs busy in gen + old_log_prob + update + sync).")
    part.lines = ["| placement | exit | steps | step s | vs colocated | gen wait s | generation s | old_log_prob s | update s | overlap wait s | "
                  "sync (transfer) s | receive (overlapped) s | idle train GPU | idle rollout GPU | tokens/s | peak GB |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    names = args.placements.split(",")
    base = None
    with tempfile.TemporaryDirectory() as tmp:
        queue = list(names)
        while queue:
            name = queue.pop(0)
            overrides, train_gpus, rollout_gpus = PLACEMENTS[name]
            if args.tiny:
                config = tiny_config(Path(tmp) / name, nprocs=train_gpus, steps=args.steps)
                extra = [o for o in overrides if not o.startswith(TINY_SETS)]
            else:
                config, extra = REFERENCE, list(overrides)
            run_dir = Path(tmp) / name / "out"
            shutil.rmtree(run_dir, ignore_errors=True)
            nocompile = "_nocompile" if "model.compile=false" in args.extra else ""
            run = train(name + nocompile, config, [*extra, *ALGORITHM, f"trainer.total_training_steps={args.steps}", "trainer.loggers=[console,jsonl]",
                                                   *args.extra], run_dir, args.deadline.timeout(args.run_timeout, args.min_run), stop_after=args.steps)
            label = name + (" (model.compile=false)" if "model.compile=false" in args.extra else "")
            m = stage_medians(timed_rows(run["rows"], args.skip), rollout_gpus is not None)
            run["medians"], run["label"] = m, label
            if name == "colocated":
                base = m["step"]
            ratio = f"{m['step'] / base:.2f}" if base and name != "colocated" else "1" if name == "colocated" else "-"
            part.lines.append(
                f"| {label} | {run['rc']} | {len([r for r in run['rows'] if 'timing_s/step' in r])} | {m['step']:.3f} | {ratio} | {m['gen']:.3f} | "
                f"{m['gen_rollout'] if rollout_gpus else m['gen']:.3f} | {m['old_log_prob']:.3f} | {m['update_actor']:.3f} | {m['gen_overlap_wait']:.3f} | "
                f"{m['sync_weights']:.4f} | {m['sync_receive']:.4f} | {m['idle_train']:.0%} | {m['idle_rollout']:.0%} | {m['tokens_s']:.0f} | {m['peak_gb']:.1f} |")
            print(part.lines[-1], flush=True)
            part.add(run, {"config.yaml": run_dir / "config.yaml", "train.log": run_dir / "train.log"})
            if (name == "colocated" and run["rc"] not in (0, "done") and not str(run["rc"]).startswith("skipped")
                    and "model.compile=false" not in args.extra and not args.tiny):
                # FSDP2 + compiled decoder layers on two GPUs never ran before this call: one retry without compiled
                # layers, and every later run the same way (a fair comparison); the failed run's log is in the archive
                print("colocated failed: again with model.compile=false, and so every later placement", flush=True)
                args.extra = [*args.extra, "model.compile=false"]
                base = None
                queue.insert(0, "colocated")


# --------------------------------------------------------------------------- learn
def learn_config(args, tmp: Path, seed: int) -> tuple[Path, list[str]]:
    """The quickstart's settings on CUDA with a model folder (or ``builtin:smollm2``) and data files: the GPU image
    has no reasoning-gym. ``--train`` may hold ``{seed}`` (one shuffle of the train set per seed)."""
    if args.tiny:
        return tiny_config(tmp / "learn", nprocs=1, steps=args.steps), ["trainer.test_freq=1", "data.val_max_samples=8"]
    for flag in ("model", "train", "val"):
        if getattr(args, flag) is None:
            raise SystemExit(f"--part learn needs --model DIR --train FILE --val FILE (bench/two_gpu/README.md says how to make them); --{flag} is missing")
    train_file = Path(args.train.format(seed=seed)).resolve()
    for path in (train_file, Path(args.val)):
        if not path.exists():
            raise SystemExit(f"--part learn: {path} does not exist (bench/two_gpu/README.md says how to make the data files)")
    src = yaml.safe_load(QUICKSTART.read_text())
    data = src["data"]
    for key in ("train_generator", "val_generator"):  # the files replace reasoning-gym's generators
        data.pop(key, None)
    data.update(train_files=[str(train_file)], val_files=[str(Path(args.val).resolve())])
    model = args.model if args.model.startswith("builtin:") else str(Path(args.model).resolve())
    src["model"].update(path=model, dtype="bfloat16")
    src["trainer"].update(device="cuda", loggers=["console", "jsonl"], save_freq=-1)
    # the decode step captured in a CUDA graph but not compiled: 16 new tokens of a 135M model gain nothing from
    # compiling, and every run (and each new batch shape: validation's 100 prompts) would pay its compile time
    src["rollout"]["engine_kwargs"] = {"compile": False}
    config = tmp / f"quickstart_gpu_seed{seed}.yaml"
    config.write_text(yaml.safe_dump(src))
    return config, [f"trainer.test_freq={args.test_freq}"]


def part_learn(args) -> None:
    """3 seeds x (synchronous colocated, split pools at staleness 1), ``--concurrent`` runs at a time: a 135M model
    uses a few GiB and a fraction of a GPU, so the six runs share the two GPUs at once (each split run: train on GPU
    0, rollout on GPU 1; each colocated run: data-parallel over both). What is compared is held-out accuracy per
    step (= per sample: the same batch size in both), which does not depend on the wall clock (staleness is exactly
    1 from step 2 on, whatever the timing); the step times of concurrent runs are not step times of a run alone."""
    seeds = [int(s) for s in args.seeds.split(",")]
    part = Part(args.out, "learn", "# Learning per sample: synchronous colocated vs split pools at staleness 1 (issue #36)\n\n"
                f"`python bench/two_gpu/run.py --part learn{' --tiny' if args.tiny else ''} --steps {args.steps} --seeds {args.seeds} "
                f"--concurrent {args.concurrent}`: examples/quickstart.yaml's task and settings on CUDA (bf16), rollout log-probs + token "
                "TIS in both schedules; held-out greedy accuracy (val/accuracy) at each validation step. "
                + (f"{args.concurrent} runs shared the GPUs at a time: step times are not those of a run alone." if args.concurrent > 1 else ""))
    table = ["| schedule | seed | exit | steps | step s (median) | held-out accuracy by step | last | best |", "|---|---|---|---|---|---|---|---|"]
    schedules = {"colocated": ["trainer.n_gpus_per_node=2"] if args.colocated_gpus == 2 else [],
                 "split_s1": PLACEMENTS["split_s1"][0]}
    with tempfile.TemporaryDirectory() as tmp:
        todo = []
        for seed in seeds:
            config, extra = learn_config(args, Path(tmp), seed)
            for name, overrides in schedules.items():
                if args.tiny:  # processes, not GPUs: the colocated tiny run on one process
                    overrides = [o for o in overrides if not o.startswith(TINY_SETS)]
                todo.append((f"{name}_seed{seed}", config, [*overrides, *ALGORITHM, *extra, f"trainer.seed={seed}",
                                                           f"trainer.total_training_steps={args.steps}", *args.extra], Path(tmp) / f"{name}_seed{seed}"))
        running: list[tuple[dict, float]] = []
        while todo or running:
            while todo and len(running) < args.concurrent:
                name, config, overrides, run_dir = todo.pop(0)
                timeout = args.deadline.timeout(args.run_timeout, args.min_run)
                if timeout is None:
                    learn_row(part, table, skipped(name, "the call's --deadline leaves too little time"), schedules, None)
                    continue
                running.append((start_train(name, config, overrides, run_dir), timeout))
            for run, timeout in list(running):
                if poll(run, timeout, None):
                    running.remove((run, timeout))
                    learn_row(part, table, result(run), schedules, run["out_dir"])
            time.sleep(2)


def learn_row(part: Part, table: list[str], run: dict, schedules: dict, run_dir: Path | None) -> None:
    curve = [(r["step"], r["val/accuracy"]) for r in run["rows"] if "val/accuracy" in r]
    run["curve"] = curve
    accs = [a for _, a in curve]
    step_s = med([r["timing_s/step"] for r in timed_rows(run["rows"], 1)]) if run["rows"] else float("nan")
    name, seed = run["name"].rsplit("_seed", 1)
    table.append(f"| {name} | {seed} | {run['rc']} | {len([r for r in run['rows'] if 'timing_s/step' in r])} | {step_s:.2f} | "
                 + ", ".join(f"{s}: {a:.2f}" for s, a in curve)
                 + f" | {accs[-1] if accs else float('nan'):.2f} | {max(accs) if accs else float('nan'):.2f} |")
    print(table[-1], flush=True)
    part.lines = table + summarize_learn(part.runs + [run], schedules)
    part.add(run, {} if run_dir is None else {"config.yaml": run_dir / "config.yaml", "train.log": run_dir / "train.log"})


def summarize_learn(runs: list[dict], schedules: dict) -> list[str]:
    """Mean and spread over seeds of the last and best held-out accuracy, per schedule."""
    lines = ["", "| schedule | seeds | last accuracy: mean (min..max) | best: mean (min..max) |", "|---|---|---|---|"]
    for name in schedules:
        got = [r["curve"] for r in runs if r["name"].startswith(name + "_seed") and r.get("curve")]
        if not got:
            continue
        last, best = [c[-1][1] for c in got], [max(a for _, a in c) for c in got]
        lines.append(f"| {name} | {len(got)} | {statistics.mean(last):.3f} ({min(last):.2f}..{max(last):.2f}) | "
                     f"{statistics.mean(best):.3f} ({min(best):.2f}..{max(best):.2f}) |")
    return lines


# --------------------------------------------------------------------------- sp
def gpu_long():
    """bench/long_context/gpu_long.py (issue #33's rows, i33's file): its shapes, rows and row writer."""
    sys.path.insert(0, str(ROOT / "bench" / "long_context"))
    try:
        import gpu_long as module
    finally:
        sys.path.pop(0)
    return module


def part_sp(args) -> None:
    gl = gpu_long()
    name = "tiny_packed" if args.tiny else "r16k"
    row = list((gl.TINY_ROWS if args.tiny else gl.ROWS)[name])  # (shape, prompts, n, prompt, response tokens, packed, budget)
    if args.response_tokens:
        row[4] = args.response_tokens
    shape, prompts, n, plen, rlen, packed, _ = row
    part = Part(args.out, "sp", "# Ulysses sequence parallelism on two GPUs (issue #36)\n\n"
                f"`python bench/two_gpu/run.py --part sp{' --tiny' if args.tiny else ''} --sp {args.sp} --steps {args.steps}`: "
                f"bench/long_context/gpu_long.py's row {name} ({shape} shape, {prompts} prompts x {n}, {plen} + {rlen} tokens, packed, "
                + ("float32 on the CPU, " if args.tiny else "bf16, gradient checkpointing, model.compile, ")
                + "token-budget micro-batches), GRPO with the hf rollout on every GPU. "
                f"Medians over steps {args.skip + 1}..{args.steps}. update tokens/s = tokens of the batch / timing_s/update_actor; "
                "peak = perf/max_memory_allocated_gb, the largest of the ranks (generation or update, whichever is higher).")
    part.lines = ["| SP | GPUs | exit | steps | step s | gen s | update s | tokens/s (step) | tokens/s (update) | mean response | peak GB per GPU |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        for sp in [int(s) for s in args.sp.split(",")]:
            run_name = f"sp{sp}"
            argv, run_dir = gl.row_command(run_name, tuple(row), tiny=args.tiny, steps=args.steps, gpu_dir=ROOT / ".gpu", work=Path(tmp))
            # sleep_threshold=0: the engine frees its weights and KV cache between rollouts whatever the card. With the
            # default (keep it while it is <= 10% of the card) SP 2's engine (2.6 + 7.1 GiB) is freed on an 80 GB H100
            # but kept on a 141 GB H200, while SP 1's (2.6 + 14.1 GiB) is freed on both: the peaks would then compare a
            # sleep policy, not SP. On an H100 this changes nothing (both are freed there anyway).
            overrides = [*argv[1:], f"trainer.n_gpus_per_node={sp}", f"actor.ulysses_sequence_parallel_size={sp}",
                         *([] if args.tiny else ["rollout.engine_kwargs.sleep_threshold=0"]), "trainer.loggers=[console,jsonl]", *args.extra]
            run = train(run_name, Path(argv[0]), overrides, run_dir, args.deadline.timeout(args.run_timeout, args.min_run), stop_after=args.steps)
            rows = timed_rows(run["rows"], args.skip)
            step, update = med([r["timing_s/step"] for r in rows]), med([r.get("timing_s/update_actor", float("nan")) for r in rows])
            tokens = med([r.get("perf/total_tokens", float("nan")) for r in rows])
            run["medians"] = m = {"step": step, "gen": med([r.get("timing_s/gen", float("nan")) for r in rows]), "update": update,
                                  "tokens_s": med([r.get("perf/throughput_tokens_per_s", float("nan")) for r in rows]),
                                  "update_tokens_s": tokens / update if update == update and update else float("nan"),
                                  "resp": med([r.get("response_length/mean", float("nan")) for r in rows]),
                                  "peak_gb": med([r.get("perf/max_memory_allocated_gb", float("nan")) for r in rows])}
            part.lines.append(f"| {sp} | {sp} | {run['rc']} | {len([r for r in run['rows'] if 'timing_s/step' in r])} | {m['step']:.1f} | {m['gen']:.1f} | "
                              f"{m['update']:.2f} | {m['tokens_s']:.0f} | {m['update_tokens_s']:.0f} | {m['resp']:.0f} | {m['peak_gb']:.1f} |")
            print(part.lines[-1], flush=True)
            part.add(run, {"train.log": run_dir / "train.log", "config.yaml": run_dir / "config.yaml"})


# --------------------------------------------------------------------------- tiny
def tiny_config(tmp: Path, *, nprocs: int, steps: int) -> Path:
    """A tiny random model from a config on the CPU (rl_core_testing.tiny_run): gloo, one process per "GPU"."""
    from rl_core_testing.tiny_run import write_tiny_run

    return write_tiny_run(tmp, nprocs=nprocs, steps=steps, trainer__torch_threads=1, actor__ppo_mini_batch_size=4)


def need_gpus(n: int) -> None:
    """The first thing a device call checks: the GPUs are there (a one-GPU machine or a wrong kind says so at once)."""
    import torch

    have = torch.cuda.device_count() if torch.cuda.is_available() else 0
    names = [torch.cuda.get_device_name(i) for i in range(have)]
    print(f"GPUs: {have} {names} | torch {torch.__version__} | CUDA {torch.version.cuda} | NCCL "
          f"{'.'.join(map(str, torch.cuda.nccl.version())) if have else '-'}", flush=True)
    if have < n:
        raise SystemExit(f"this part needs {n} GPUs and this machine shows {have} (the device call's kind: nvidia-h100-x2 / "
                         "nvidia-h200-x2; CUDA_VISIBLE_DEVICES limits it): nothing was run")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", required=True, choices=["nccl", "async", "learn", "sp", "all"])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--tiny", action="store_true", help="CPU smoke run: tiny random model, gloo, 2 processes")
    ap.add_argument("--steps", type=int, default=None, help="steps per run (async 10, learn 50, sp 2; tiny 3)")
    ap.add_argument("--skip", type=int, default=None, help="first steps left out of the medians (async 3, sp 1; tiny 1)")
    ap.add_argument("--run-timeout", type=float, default=None, help="seconds one run may take before it is killed (async 200, learn 150, sp 540)")
    ap.add_argument("--placements", default="colocated,split_s1,split_s1_ov,split_s0", help="async: which placements, in this order")
    ap.add_argument("--model", help="learn: a model folder (HF format) or builtin:smollm2 (examples/quickstart.yaml's; README)")
    ap.add_argument("--train", help="learn: the train data file (parquet / jsonl); {seed} in it is replaced by the run's seed")
    ap.add_argument("--val", help="learn: the held-out data file")
    ap.add_argument("--seeds", default="0,1,2", help="learn: comma-separated seeds")
    ap.add_argument("--test-freq", type=int, default=5, help="learn: validate every N steps")
    ap.add_argument("--colocated-gpus", type=int, default=2, choices=[1, 2], help="learn: GPUs of the synchronous colocated run")
    ap.add_argument("--sp", default=None, help="sp: comma-separated SP sizes (default 2; tiny: 1,2; 1 = the one-GPU baseline, gpu_long.py's r16k)")
    ap.add_argument("--response-tokens", type=int, default=None, help="sp: response tokens instead of the row's 16,384")
    ap.add_argument("--no-probe", action="store_true", help="async: skip the transfer probe (--part nccl) that runs first")
    ap.add_argument("--deadline", type=float, default=None,
                    help="seconds after $CALL_START (epoch; else this script's start) by which every run has ended (device: 560; "
                         "a run that would get less than its part's minimum is skipped, its row says so)")
    ap.add_argument("--concurrent", type=int, default=None, help="learn: runs at a time (default 6 on GPUs: all at once; tiny 2)")
    ap.add_argument("--extra", nargs="*", default=[], help="config overrides added to every run, e.g. model.compile=false")
    args = ap.parse_args(argv)
    parts = ["async", "sp", "learn"] if args.part == "all" else [args.part]
    if not args.tiny:
        need_gpus(2 if args.part != "sp" or any(int(x) > 1 for x in (args.sp or "2").split(",")) else 1)
    # steps, skip, per-run timeout, the least time a run is started with
    defaults = {"nccl": (0, 0, 150, 0), "async": (10, 3, 200, 90), "learn": (50, 1, 400, 60), "sp": (2, 1, 540, 200)}
    deadline = Deadline(args.deadline if args.deadline is not None else (None if args.tiny else 560))
    for name in parts:
        steps, skip, timeout, minimum = defaults[name]
        sub = argparse.Namespace(**vars(args))
        sub.steps = args.steps or (3 if args.tiny else steps)
        sub.skip = args.skip if args.skip is not None else (1 if args.tiny else skip)
        sub.run_timeout = args.run_timeout or (300 if args.tiny else timeout)
        sub.sp = args.sp or ("1,2" if args.tiny else "2")  # the CPU smoke run: both sizes
        sub.deadline, sub.min_run = deadline, 20 if args.tiny else minimum
        sub.concurrent = args.concurrent or (2 if args.tiny else 6)
        start = time.time()
        {"nccl": part_nccl, "async": part_async, "learn": part_learn, "sp": part_sp}[name](sub)
        print(f"part {name}: {time.time() - start:.0f} s; {args.out / (name + '.md')}", flush=True)
        print((args.out / f"{name}.md").read_text(), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
