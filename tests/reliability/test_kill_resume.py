"""kill -9 of the controller or of a worker at seeded random points; every resume ends with identical metrics.

Runs start from a forkserver that has imported torch, transformers and
rl-core once, so a killed-and-resumed run costs its steps, not its imports.
A chain kills one output folder's run again and again (each kill lands after
a random number of logged steps plus a random delay, so some land inside a
step, some inside a checkpoint save), resumes it each time, and finally
compares its metrics.jsonl with an uninterrupted run's.
"""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

import pytest

from tests.reliability import tally
from tests.reliability.cli_child import run_cli as _child
from tests.reliability.runs import make_run, metrics_equal, read_metrics, set_config

pytest.importorskip("rl_train_fsdp", reason="needs the rl-train-fsdp plugin (pip install -e plugins/train_fsdp)")
psutil = pytest.importorskip("psutil", reason="finds the worker processes to kill")

STEPS = 4
LOCAL = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}


@pytest.fixture(scope="module")
def ctx(rlcore_forkserver):
    return rlcore_forkserver


def _start(ctx, cfg: Path, log: Path, *extra: str):
    p = ctx.Process(target=_child, args=(["train", str(cfg), "--no-progress", *extra], str(log)))
    p.start()
    return p


def _rows(out: Path) -> int:
    try:
        return sum(1 for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip())
    except FileNotFoundError:
        return 0


def _run_to_end(ctx, cfg: Path, log: Path) -> None:
    p = _start(ctx, cfg, log)
    p.join(600)
    assert p.exitcode == 0, log.read_text()[-3000:]


def _setup(root: Path, nprocs: int, steps: int) -> Path:
    cfg = make_run(root, nprocs=nprocs)
    set_config(cfg, trainer__save_freq=1, trainer__total_training_steps=steps, trainer__max_ckpt_to_keep=2)
    return cfg


def _listening(pids: list[int]) -> set[tuple[str, int]]:
    out = set()
    for pid in pids:
        try:
            conns = psutil.Process(pid).net_connections(kind="inet")
        except psutil.NoSuchProcess:
            continue
        out |= {(c.laddr.ip, c.laddr.port) for c in conns if c.status == psutil.CONN_LISTEN}
    return out


@pytest.fixture(scope="module")
def reference(ctx, tmp_path_factory):
    """``reference(nprocs, steps)``: the metrics of an uninterrupted run of that shape (run once per shape; the
    chains of the same shape compare with the same run)."""
    done: dict[tuple[int, int], list[dict]] = {}

    def get(nprocs: int, steps: int) -> list[dict]:
        if (nprocs, steps) not in done:
            tmp = tmp_path_factory.mktemp(f"ref_{nprocs}x{steps}")
            _run_to_end(ctx, _setup(tmp / "ref", nprocs, steps), tmp / "ref.log")
            done[nprocs, steps] = read_metrics(tmp / "ref" / "out")
        return done[nprocs, steps]

    return get


def _kill_chain(ctx, tmp: Path, reference: list[dict], *, seed: int, kills: int, nprocs: int, steps: int, target: str) -> tuple[int, bool, str]:
    """Run, kill ``kills`` times (controller or a worker), resume to the end; (kills done, identical, detail)."""
    rng = random.Random(seed)
    cfg = _setup(tmp / "run", nprocs, steps)
    out = tmp / "run" / "out"
    log = tmp / "run.log"
    done = 0
    while done < kills:
        before = _rows(out)
        p = _start(ctx, cfg, log)
        wait_rows = min(steps - 1, before + rng.randint(0, 2))
        if target == "worker" and done == 0:
            wait_rows = max(wait_rows, 1)  # the workers' process group is up (its sockets are checked below)
        deadline = time.monotonic() + 300
        while _rows(out) < wait_rows and p.is_alive() and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(rng.uniform(0.0, 1.5))
        if not p.is_alive():  # finished (or failed) before the kill
            assert p.exitcode == 0, log.read_text()[-3000:]
            break
        victim = p.pid
        if target == "worker":
            workers = [w for w in psutil.Process(p.pid).children() if w.name().startswith("python")]
            if workers:
                victim = rng.choice(workers).pid
                if done == 0:  # the rendezvous of a running 2-rank run: nothing listens beyond localhost
                    sockets = _listening([p.pid, *(w.pid for w in workers)])
                    exposed = sorted(x for x in sockets if x[0] not in LOCAL)
                    tally.record("rendezvous", "2-rank run (controller + 2 workers)", bool(sockets) and not exposed)
                    assert sockets, "no listening socket found: an exposed one would not be seen either"
                    assert not exposed, f"sockets listening beyond localhost: {exposed}"
        os.kill(victim, signal.SIGKILL)
        p.join(120)
        if p.is_alive():  # a worker was killed: the controller must notice and stop on its own
            p.kill()
            p.join()
            return done, False, "the controller did not stop within 120 s after its worker was killed"
        done += 1
        for child in psutil.Process().children(recursive=True):  # orphaned workers of a killed controller
            if child.pid != p.pid and "spawn_main" in " ".join(child.cmdline()) and "forkserver" not in " ".join(child.cmdline()):
                child.kill()
    _run_to_end(ctx, cfg, log)
    same, detail = metrics_equal(reference, read_metrics(out))
    return done, same, detail


CHAINS = {
    # name: (seed, kills, ranks, steps, what is killed)
    "controller, seed 1": (1, 5, 1, STEPS, "controller"),
    "controller, seed 2": (2, 4, 1, STEPS, "controller"),
    "worker of a 2-rank run": (3, 2, 2, 3, "worker"),
}


@pytest.mark.slow
@pytest.mark.parametrize("chain", list(CHAINS))
def test_kill_and_resume_gives_identical_metrics(ctx, reference, tmp_path, chain):
    seed, kills, nprocs, steps, target = CHAINS[chain]
    done, same, detail = _kill_chain(ctx, tmp_path, reference(nprocs, steps), seed=seed, kills=kills, nprocs=nprocs, steps=steps, target=target)
    for i in range(done):
        tally.record("kills", f"{chain}, kill {i + 1}", same)
    assert done >= 1, "no kill landed before the run finished"
    assert same, detail
