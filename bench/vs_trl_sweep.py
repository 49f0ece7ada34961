"""Many seeds of the same-settings comparison at once (issue 18): is rl-core's early lag behind TRL real?

``bench/vs_trl_cpu.py`` runs one seed after the other on the 2-core machine (~4.5 min per seed pair), too
slow to give the step-5 difference a standard error below the binomial band. This driver runs the same two
runs (``trl`` and ``rlcore-same``, 10 steps, greedy evaluation every 5) for many seeds in parallel, several
pairs at a time on one machine, and pools them with ``bench/vs_trl_seeds.py``.

With ``--device cuda`` both frameworks run on the GPU in float32 (TRL with ``use_cpu=False``, rl-core with
``trainer.device=cuda``). rl-core's hf rollout keeps the plain decode loop it runs on the CPU
(``static_decode=false``), so the code path compared is the CPU quickstart's; only the device differs.

    # here (reasoning-gym installed): the data files, only the rows 10 steps read
    python bench/vs_trl_sweep.py prepare --seeds 20-79 --to .gpu/vs_trl_data
    # on the GPU machine (TRL, rl-core and the SmolLM2 folder installed in one python)
    python3 bench/vs_trl_sweep.py run --seeds 20-79 --data .gpu/vs_trl_data --out $OUT/sweep --jobs 12 \\
        --launch-until 420 --kill-at 560 --device cuda --trl-python python3
    # any machine: the pooled table of what finished
    python bench/vs_trl_seeds.py OUT/sweep/runs

A pair still running at ``--kill-at`` seconds is killed and left out (an unpaired run is ignored by the
table). Smoke test on the CPU: ``run --seeds 0 --steps 1 --eval-every 1 --jobs 1 --device cpu``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import vs_trl_cpu  # noqa: E402  (standard library only at import)


def seed_list(text: str) -> list[int]:
    """``"20-79"`` or ``"3,5,9"`` -> seeds."""
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def prepare(seeds: list[int], to: Path, rows: int) -> None:
    """``TO/val.jsonl`` and ``TO/train-sSEED.jsonl`` cut to the first ``rows`` rows (a 10-step run reads 20)."""
    full = Path("/tmp/vs_trl_sweep_prepare")
    vs_trl_cpu.write_data(full, seeds)
    to.mkdir(parents=True, exist_ok=True)
    shutil.copy(full / "data" / "val.jsonl", to / "val.jsonl")
    for seed in seeds:
        lines = (full / "data" / f"train-s{seed}.jsonl").read_text().splitlines(keepends=True)
        (to / f"train-s{seed}.jsonl").write_text("".join(lines[:rows]))
    print(f"wrote {len(seeds)} training files of {rows} rows and val.jsonl to {to}")


def run(args: argparse.Namespace) -> int:
    start = time.monotonic()
    seeds = seed_list(args.seeds)
    queue = list(seeds)
    lock = threading.Lock()
    (args.out / "logs").mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads), TOKENIZERS_PARALLELISM="false")
    done: list[int] = []

    def one(job: int, name: str, seed: int, work: Path) -> bool:
        cmd = [sys.executable, str(HERE / "vs_trl_cpu.py"), "run", name, "--seed", str(seed), "--work", str(work), "--out", str(args.out),
               "--steps", str(args.steps), "--eval-every", str(args.eval_every), "--device", args.device, "--trl-python", args.trl_python]
        left = args.kill_at - (time.monotonic() - start)
        log = args.out / "logs" / f"job{job}.log"
        with open(log, "a") as f:
            f.write(f"[{time.monotonic() - start:.0f} s] {' '.join(cmd)}\n")
            f.flush()
            proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True)
            try:
                rc = proc.wait(timeout=max(left, 1))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait()
                f.write(f"[{time.monotonic() - start:.0f} s] {name} seed {seed}: killed at --kill-at\n")
                return False
        if rc:
            for part in (work / "logs").glob(f"{name}-s{seed}*.log"):  # the framework's own log, for the failure
                shutil.copy(part, args.out / "logs" / f"failed-{part.name}")
        return rc == 0

    def worker(job: int) -> None:
        work = Path(args.work) / f"job{job}"
        (work / "data").mkdir(parents=True, exist_ok=True)
        for f in args.data.glob("*.jsonl"):
            shutil.copy(f, work / "data" / f.name)
        while time.monotonic() - start < args.launch_until:
            with lock:
                if not queue:
                    return
                seed = queue.pop(0)
            if all(one(job, name, seed, work) for name in ("trl", "rlcore-same")):
                with lock:
                    done.append(seed)
            shutil.rmtree(work / "logs", ignore_errors=True)  # run folders (hf_final: 0.5 GB each)

    threads = [threading.Thread(target=worker, args=(j,)) for j in range(args.jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    from vs_trl_seeds import load, table

    text = table(load([args.out / "runs"])) if done else "no seed pair finished"
    (args.out / "table.md").write_text(text + "\n")
    print(text)
    print(f"{len(done)} of {len(seeds)} seed pairs finished in {time.monotonic() - start:.0f} s with {args.jobs} jobs on {args.device}")
    return 0 if done else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare", help="data files for the seeds (needs reasoning-gym)")
    p.add_argument("--seeds", required=True)
    p.add_argument("--to", type=Path, required=True)
    p.add_argument("--rows", type=int, default=40, help="training rows kept per seed (2 per step)")
    p = sub.add_parser("run", help="seed pairs in parallel until the time limits")
    p.add_argument("--seeds", required=True)
    p.add_argument("--data", type=Path, required=True, help="what `prepare` wrote")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--work", type=Path, default=Path("/tmp/vs_trl_sweep"))
    p.add_argument("--jobs", type=int, default=4)
    p.add_argument("--threads", type=int, default=1, help="CPU threads per run")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--eval-every", type=int, default=5)
    p.add_argument("--launch-until", type=float, default=420, help="seconds: no new pair starts after this")
    p.add_argument("--kill-at", type=float, default=560, help="seconds: runs still going are killed")
    p.add_argument("--device", default="cuda", choices=["cpu", "cuda"])
    p.add_argument("--trl-python", default=sys.executable)
    args = ap.parse_args(argv)
    if args.cmd == "prepare":
        prepare(seed_list(args.seeds), args.to, args.rows)
        return 0
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())
