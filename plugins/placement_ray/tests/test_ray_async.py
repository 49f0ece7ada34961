"""The async job (a rollout pool of its own, one-step off-policy) on the two-node Ray cluster of conftest.py.

1 train + 1 rollout worker, one CPU per node: the train pool and the rollout pool land on different nodes, so the
weight transfer group meets through the TCP store the train pool's rank 0 hosts on its node's Ray address
(rl_core.placement.rendezvous) instead of the FileStore of one machine. The reference is the same job on
local placement (the train worker in this process, the rollout worker a spawned process), same seed.
"""

from __future__ import annotations

import os
import re
import signal
import time

import pytest
from rl_core.config.load import load_config
from rl_core.placement.contract import WorkerError
from rl_placement_ray.listeners import listening_sockets
from rl_core.plan.resolver import resolve
from rl_core.trainer.loop import Trainer

from tests.e2e.helpers import read_metrics, write_tiny_run

pytest.importorskip("rl_train_fsdp", reason="needs the rl-train-fsdp plugin (pip install -e plugins/train_fsdp)")

RUN = dict(
    steps=2, rollout__n_gpus_per_node=1, async__max_staleness=1, trainer__torch_threads=1,
    rollout__calculate_log_probs=True, algorithm__rollout_correction__rollout_is="token", async__sync_timeout_s=30,
)
VOLATILE = ("timing_s/", "perf/")  # wall-clock numbers differ between any two runs (and the row's "time" stamp)


def _trainer(tmp_path, **extra) -> Trainer:
    stack, problems = resolve(load_config(write_tiny_run(tmp_path, **RUN, **extra)))
    assert stack is not None, [p.render() for p in problems]
    return Trainer(stack, progress=False)


def _numbers(row: dict) -> dict:
    return {k: v for k, v in row.items() if not k.startswith(VOLATILE) and k != "time"}


@pytest.mark.slow
@pytest.mark.dist
def test_async_job_on_two_nodes_matches_local_placement_and_a_dead_rollout_actor_is_named(tmp_path, two_node_cluster, ray_env):
    local = _trainer(tmp_path / "local")
    try:
        local.fit()
    finally:
        local.close()
    reference = read_metrics(tmp_path / "local" / "out")
    assert local.pipeline.rendezvous.startswith("file://")  # one machine: a FileStore, loopback sockets

    run = _trainer(tmp_path / "ray", trainer__placement="ray", ray__address=two_node_cluster.address)
    try:
        run.fit()
        train_at, rollout_at = run.cluster.pool("main").placement[0], run.cluster.pool("rollout").placement[0]
        assert train_at["node_id"] != rollout_at["node_id"], "the train and rollout pools should be on different nodes"
        # two nodes: the TCP store the train rank 0 hosts, listening on its node's Ray address only (never 0.0.0.0 / ::)
        host, port = run.pipeline.rendezvous.removeprefix("tcp://").rsplit(":", 1)
        assert host == train_at["ip"], run.pipeline.rendezvous
        bound = listening_sockets([train_at["pid"]])  # None where /proc cannot tell (not Linux)
        assert bound is None or {s["ip"] for s in bound if s["port"] == int(port)} == {host}, bound
        rows = read_metrics(tmp_path / "ray" / "out")
        assert [r["step"] for r in rows] == [r["step"] for r in reference] == [1, 2]
        assert [r["async/staleness"] for r in rows] == [0, 1]  # step 2's batch was generated during step 1's update
        # Exactly equal, no tolerance: both runs execute the same kernels on the same machine in the same order with
        # one thread per worker (trainer.torch_threads=1), there is no cross-rank reduction (one train rank), and the
        # transfer copies bytes; a tolerance would only hide a sync that lost bits.
        assert [_numbers(r) for r in rows] == [_numbers(r) for r in reference]

        # the rollout actor dies: the next weight transfer names the pool, the rank and where it ran (the train side's
        # broadcast failing: "rollout pool rank 0 ... during sync_weights"; or, the last sync having been sent in the
        # background (async.overlap_sync), the rollout pool's own receive of it: "rank 0 [rollout] ... receive_weights")
        os.kill(rollout_at["pid"], signal.SIGKILL)
        killed_at = time.monotonic()
        with pytest.raises(WorkerError) as err:
            run.pipeline.sync(3)
        took = time.monotonic() - killed_at
        who = rf"(rollout pool rank 0|rank 0 \[rollout\]) on node \S+ \({rollout_at['node_id'][:8]}, [^)]*pid {rollout_at['pid']}\)"
        assert re.search(who + " died during (sync_weights|receive_weights)", str(err.value)), err.value
        assert took < 60, f"took {took:.0f} s to report the dead rollout actor"
    finally:
        run.close(force=True)
