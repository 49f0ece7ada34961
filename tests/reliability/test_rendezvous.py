"""A multi-process run opens no socket to the network (issue 11, item 2)."""

from __future__ import annotations

import pytest

from tests.reliability import tally
from tests.reliability.runs import make_run

psutil = pytest.importorskip("psutil", reason="reads the workers' sockets")
pytest.importorskip("rl_train_fsdp", reason="needs the rl-train-fsdp plugin (pip install -e plugins/train_fsdp)")

LOCAL = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}


def _listening(pid: int) -> set[tuple[str, int]]:
    return {(c.laddr.ip, c.laddr.port) for c in psutil.Process(pid).net_connections(kind="inet") if c.status == psutil.CONN_LISTEN}


@pytest.mark.dist
def test_two_rank_cluster_listens_on_localhost_only(tmp_path):
    from rl_core.cluster import LocalCluster
    from rl_core.config.load import load_config
    from rl_core.plugins import get_registry
    from rl_core.resolver import resolve

    cfg = make_run(tmp_path, nprocs=2)
    stack, problems = resolve(load_config(str(cfg), []), get_registry())
    assert stack is not None, problems
    cluster = LocalCluster(stack)
    try:
        pids = [p.pid for p in cluster._procs]
        cluster.call("sync_weights")  # a collective: every rank has its gloo pairs up
        sockets = {pid: _listening(pid) for pid in [*pids, psutil.Process().pid]}
    finally:
        cluster.close()
    everything = set().union(*sockets.values())
    exposed = sorted(s for s in everything if s[0] not in LOCAL)
    tally.record("rendezvous", "2-rank gloo cluster", not exposed and bool(everything))
    assert everything, "no listening socket found: the test would not see an exposed one either"
    assert not exposed, f"sockets listening beyond localhost: {exposed} (per process: {sockets})"
