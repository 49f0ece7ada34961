"""LocalCluster's workers are not daemonic (an engine inside may start processes of its own, as SGLang's does):
an interpreter that exits without closing the cluster must still end, and take its workers with it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.dist
def test_exit_without_close_kills_the_workers(tmp_path):
    pytest.importorskip("rl_train_fsdp", reason="needs the rl-train-fsdp plugin (pip install -e plugins/train_fsdp)")
    code = textwrap.dedent(f"""
        from pathlib import Path
        from rl_core.placement.local import LocalCluster
        from rl_core.config.load import load_config
        from rl_core.plan.resolver import resolve
        from tests.e2e.helpers import write_tiny_run

        stack, problems = resolve(load_config(write_tiny_run(Path({str(tmp_path)!r}), nprocs=2)))
        assert stack is not None, problems
        cluster = LocalCluster(stack)
        print(*[p.pid for p in cluster._procs], flush=True)
        # no close(): the interpreter exits with the workers still waiting for calls
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    pids = [int(p) for p in out.stdout.split()]
    assert len(pids) == 2
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        # a zombie already reaped by init is gone; one still running is the failure
        assert Path(f"/proc/{pid}/status").read_text().find("State:\tZ") >= 0, f"worker {pid} outlived the controller"


@pytest.mark.dist
def test_a_failed_start_ends_every_worker_and_the_processes_they_started(tmp_path):
    """A rank whose engine started a process of its own and then failed must not hang at its exit (multiprocessing
    joins non-daemonic children), nor keep the controller waiting: the start fails with the rank's error, and no
    worker and no engine child is left."""
    code = textwrap.dedent(f"""
        import sys
        from rl_core.placement.contract import WorkerError
        from rl_core.placement.local import LocalCluster
        from tests.core.cluster_faults import EngineChildThenFailure

        try:
            LocalCluster(EngineChildThenFailure({str(tmp_path)!r}))
        except WorkerError as exc:
            print(exc, file=sys.stderr)
            sys.exit(3)
    """)
    from rl_core_testing.bounded_run import communicate_bounded

    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT, start_new_session=True)
    out = communicate_bounded(proc, timeout=180)  # before the fix: never returned
    assert proc.returncode == 3, out[-3000:]
    assert "failed in start" in out and "the engine broke after starting its scheduler" in out, out[-3000:]
    children = [int(p.name.split("-")[1]) for p in tmp_path.glob("child-*")]
    assert children, out[-3000:]
    for pid in children:
        alive = Path(f"/proc/{pid}").exists() and "State:\tZ" not in Path(f"/proc/{pid}/status").read_text()
        assert not alive, f"the engine child {pid} outlived its worker"


def test_after_a_death_keeps_the_dead_rank_whole_and_the_others_first_line():
    from rl_core.placement.contract import after_a_death

    dead = "rank 1 died during update with exit code -9 (killed: often the OOM killer; lower micro-batch sizes)"
    reset = "rank 0 failed in update: RuntimeError: Connection reset by peer\nTraceback (most recent call last):\n  ..."
    assert after_a_death([dead, reset]) == [dead, "rank 0 failed in update: RuntimeError: Connection reset by peer (after a peer died)"]
    # no death: every failure keeps its traceback
    assert after_a_death([reset]) == [reset]


def test_a_worker_killed_by_a_signal_is_named_by_it():
    from rl_core.placement.local import _killed_by

    assert "OOM killer" in _killed_by(-9)  # SIGKILL: the kernel's OOM killer is the usual sender
    assert _killed_by(-10) == " (killed by SIGUSR1)" and "OOM" not in _killed_by(-15)
    assert _killed_by(1) == _killed_by(0) == _killed_by(None) == ""
