"""GRPO with the FSDP trainer on a real two-node Ray cluster (one rank per node) against in-process mode.

The reference is the local cluster (two spawned processes on gloo) with the
same seed and config; the Ray runs are `rlcore train` processes joining the
cluster of conftest.py with ``trainer.placement=ray ray.address=...``, exactly
as a user would against a running cluster.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests.e2e.helpers import read_metrics, write_tiny_run
from tests.reliability.runs import cli

pytest.importorskip("rl_train_fsdp", reason="needs the rl-train-fsdp plugin (pip install -e plugins/train_fsdp)")

STEPS = 3
VOLATILE = ("timing_s/", "perf/")  # wall-clock numbers differ between any two runs


def _numbers(row: dict) -> dict:
    # "time" is the row's wall-clock stamp: within rel 1e-6 only while the two runs are < ~30 min apart
    return {k: v for k, v in row.items() if not k.startswith(VOLATILE) and k != "time"}


def _assert_same_metrics(reference: list[dict], rows: list[dict]) -> None:
    assert [r["step"] for r in rows] == [r["step"] for r in reference]
    for ref, got in zip(reference, rows):
        ref, got = _numbers(ref), _numbers(got)
        assert ref.keys() == got.keys()
        for k in ref:
            assert got[k] == pytest.approx(ref[k], rel=1e-6, abs=1e-7), (got["step"], k)


def _ray_config(tmp_path, address: str):
    # world size 2 as trainer.nnodes=2 x trainer.n_gpus_per_node=1: one rank per node
    return write_tiny_run(
        tmp_path, nprocs=1, steps=STEPS,
        trainer__nnodes=2, trainer__placement="ray", trainer__save_freq=1, ray__address=address,
    )


class Train:
    """`rlcore train CONFIG` in a subprocess; its output collected by a thread as it comes."""

    def __init__(self, cfg, env) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rl_core", "train", str(cfg), "--no-progress"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
        )
        self.lines: list[str] = []
        self.reader = threading.Thread(target=lambda: self.lines.extend(self.proc.stdout), daemon=True)
        self.reader.start()

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def finish(self, timeout: float = 600) -> int:
        self.proc.wait(timeout)
        self.reader.join(10)
        return self.proc.returncode

    def placement(self) -> dict[int, tuple[str, int]]:
        """rank -> (node id prefix, pid), from the placement table the run prints."""
        found = re.findall(r"rank (\d+) -> node \S+ \((\w+), [^)]*\) pid (\d+)", self.output)
        return {int(r): (node, int(pid)) for r, node, pid in found}


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> list[dict]:
    """The same job in-process mode: LocalCluster, 2 spawned ranks on gloo, same seed."""
    tmp = tmp_path_factory.mktemp("local")
    cfg = write_tiny_run(tmp, nprocs=2, steps=STEPS, trainer__save_freq=1)
    code, out, err = cli("train", str(cfg), "--no-progress")  # in this process: its ranks are spawned as always
    assert code == 0, out + err
    rows = read_metrics(tmp / "out")
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    return rows


@pytest.mark.slow
@pytest.mark.dist
def test_two_nodes_one_rank_each_match_in_process_mode_and_a_killed_worker_resumes(tmp_path, two_node_cluster, reference):
    """One rank per node; rank 1 killed after the step-1 checkpoint: the run stops naming it, the same command resumes
    (again one rank per node), and the metrics of every step, the killed run's and the resumed run's, equal in-process
    mode's. (One Ray job serves both checks: an uninterrupted run of its own repeated the same steps, CI time.)"""
    cfg = _ray_config(tmp_path, two_node_cluster.address)
    ckpt = tmp_path / "out" / "checkpoints"
    run = Train(cfg, two_node_cluster.env)
    deadline = time.monotonic() + 300
    while not ((ckpt / "global_step_1").is_dir() and 1 in run.placement()):
        assert run.proc.poll() is None, run.output
        assert time.monotonic() < deadline, f"no checkpoint within 300 s:\n{run.output}"
        time.sleep(0.05)
    node, pid = run.placement()[1]
    os.kill(pid, signal.SIGKILL)  # as the OOM killer would
    killed_at = time.monotonic()
    code = run.finish(timeout=120)
    took = time.monotonic() - killed_at
    assert code == 1, run.output
    assert took < 60, f"the controller took {took:.0f} s to stop"
    err = run.output
    assert "Traceback" not in err, err
    assert re.search(rf"rank 1 \[actor\+rollout\] on node \S+ \({node}, [^)]*pid {pid}\) died during \w+", err), err
    assert "run the same command to resume" in err
    assert (ckpt / "global_step_1").is_dir()

    again = Train(cfg, two_node_cluster.env)
    assert again.finish() == 0, again.output
    for placed in (run.placement(), again.placement()):
        assert sorted(placed) == [0, 1], again.output
        assert placed[0][0] != placed[1][0], f"both ranks on one node:\n{again.output}"
    resumed = re.search(r"resumed from \S+ \(step (\d+)\)", again.output)
    assert resumed and 1 <= int(resumed.group(1)) < STEPS, again.output
    _assert_same_metrics(reference, read_metrics(tmp_path / "out"))


def _pools_placed(output: str) -> dict[str, str]:
    """pool (``actor+rollout``, ``critic``) -> the node id prefix its rank 0 landed on, from the tables the run prints."""
    found, pool = {}, None
    for line in output.splitlines():
        head = re.match(r"ray: \d+ worker\(s\) \[([\w+]+)\]", line)
        if head:
            pool = head.group(1)
        rank0 = re.search(r"rank 0 -> node \S+ \((\w+), ", line)
        if rank0 and pool:
            found[pool] = rank0.group(1)
    return found


@pytest.mark.slow
@pytest.mark.dist
def test_critic_in_a_pool_of_its_own_on_the_other_node(tmp_path, two_node_cluster):
    """PPO with the critic given a worker of its own (critic.n_gpus_per_node=1): on a node with one CPU each, the
    actor's pool and the critic's land on different nodes, and the run equals the colocated in-process one."""
    common = dict(estimator="gae", steps=2, trainer__torch_threads=1)
    local = write_tiny_run(tmp_path / "local", **common)
    code, out, err = cli("train", str(local), "--no-progress")  # in this process, one torch thread as the Ray run's
    assert code == 0, out + err
    cfg = write_tiny_run(tmp_path / "ray", **common, trainer__placement="ray", ray__address=two_node_cluster.address, critic__n_gpus_per_node=1)
    run = Train(cfg, two_node_cluster.env)
    assert run.finish() == 0, run.output
    placed = _pools_placed(run.output)
    assert set(placed) == {"actor+rollout", "critic"} and placed["actor+rollout"] != placed["critic"], run.output
    _assert_same_metrics(read_metrics(tmp_path / "local" / "out"), read_metrics(tmp_path / "ray" / "out"))
