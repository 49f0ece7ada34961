"""The Ray instance a run starts (``trainer.placement=ray``, no ``ray.address``) listens on loopback only.

A child process brings the instance up exactly as a run does (:func:`rl_core.placement.ray_connect.connect`
with the run's ``ray`` section, then a two-rank gloo :class:`RayWorkerGroup`, as :class:`RayCluster` does), and
reports, from ``/proc/net/tcp{,6}``, every TCP socket that it and every process it started listen on, plus
what the workers see of their node's Ray processes (what ``rlcore doctor --cluster`` prints).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from rl_core.config.schema import RayConfig
from rl_core.placement.listeners import _hex_to_ip, describe, is_loopback, listening_sockets
from rl_core.placement.ray_loopback import exposure_warnings

from tests.ray.conftest import NEEDS_RAY, RAY_ENV
from tests.reliability import tally

BRING_UP = r"""
import json, os, sys
from rl_core.config.schema import RayConfig
from rl_core.placement.listeners import descendants, listening_sockets, ray_session_pids
from rl_core.placement.ray_connect import connect
from rl_core.placement.ray_group import RayWorkerGroup
from rl_core.placement.ray_pools import ResourcePool

def on_worker(info):
    import torch, torch.distributed as dist
    x = torch.ones(1)
    dist.all_reduce(x)  # the group works
    return {"sum": x.item(), "ip": info["ip"], "listeners": listening_sockets(ray_session_pids())}

assert connect(RayConfig(num_cpus=2))
group = RayWorkerGroup(ResourcePool(("probe",), 1, 2, "cpu", 0.5), collective_timeout_s=60, start_timeout_s=60, threads=1)
try:
    workers = group.run(on_worker)
    mine = listening_sockets(descendants(os.getpid()))
finally:
    group.close()
import ray; ray.shutdown()
print("RESULT " + json.dumps({"workers": workers, "all": mine}))
"""


def test_proc_addresses_decode():
    assert _hex_to_ip("0100007F") == "127.0.0.1"
    assert _hex_to_ip("00000000000000000000000001000000") == "::1"
    assert _hex_to_ip("0000000000000000FFFF00000100007F") == "::ffff:127.0.0.1"
    assert is_loopback("::ffff:127.0.0.1") and is_loopback("::1") and is_loopback("127.0.0.1")
    assert not is_loopback("::") and not is_loopback("0.0.0.0") and not is_loopback("192.0.2.2")


def test_own_listener_is_seen():
    import socket

    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        s.listen()
        port = s.getsockname()[1]
        found = listening_sockets([os.getpid()])
    if found is None:
        pytest.skip("no /proc/net/tcp on this system")
    mine = [x for x in found if x["port"] == port]
    assert mine and mine[0]["ip"] == "0.0.0.0"
    assert "reachable from the network" in describe(mine)[0]


def test_opting_out_of_loopback_is_a_warning():
    assert exposure_warnings(RayConfig()) == []
    lines = exposure_warnings(RayConfig(node_ip_address="10.1.2.3", dashboard_host="0.0.0.0"))
    assert len(lines) == 2 and "ray.node_ip_address=10.1.2.3" in lines[0] and "ray.dashboard_host=0.0.0.0" in lines[1]


@pytest.mark.dist
def test_the_runs_local_ray_instance_listens_on_loopback_only():
    pytest.importorskip("ray", reason=NEEDS_RAY)
    if not Path("/proc/net/tcp").exists():
        pytest.skip("reads /proc/net/tcp (Linux)")
    temp = tempfile.mkdtemp(prefix="rlray", dir="/tmp")  # short: Ray's socket paths live under it
    env = {**os.environ, **RAY_ENV, "RAY_TMPDIR": temp}
    env.pop("RAY_ADDRESS", None)
    try:
        out = subprocess.run([sys.executable, "-c", BRING_UP], capture_output=True, text=True, env=env, timeout=240)
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert out.returncode == 0 and line, out.stdout[-3000:] + out.stderr[-3000:]
    result = json.loads(line[len("RESULT "):])
    workers, everything = result["workers"], result["all"]
    assert [w["sum"] for w in workers] == [2.0, 2.0]
    assert {w["ip"] for w in workers} == {"127.0.0.1"}, "Ray gave the node an external address"
    names = {s["process"] for s in everything}
    # not vacuous: the GCS, the raylet, and the workers each listen on something
    assert "gcs_server" in names and "raylet" in names and any(n.startswith("ray::RankWorker") for n in names), describe(everything)
    exposed = [s for s in everything if not is_loopback(s["ip"])]
    for s in everything:
        tally.record("ray_loopback", f"{s['process']} port {s['port']}", is_loopback(s["ip"]))
    assert not exposed, "listening beyond loopback:\n" + "\n".join(describe(exposed))
    for w in workers:  # what doctor --cluster reports from the node's side agrees
        assert w["listeners"] and all(is_loopback(s["ip"]) for s in w["listeners"]), describe(w["listeners"])
