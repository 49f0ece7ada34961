"""`rlcore doctor --cluster` on the two-node cluster: both nodes, their versions, an all-reduce across them."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from importlib import metadata

import pytest
from rl_placement_ray.doctor import disagreements, render, versions


def _doctor_command(address: str) -> list[str]:
    if importlib.util.find_spec("rl_doctor") is not None:  # `rlcore doctor` is rl-doctor's; it runs the card's check
        return [sys.executable, "-m", "rl_core", "doctor", "--cluster", "--address", address, "--json"]
    # without rl-doctor, the same code through its module entry point
    return [sys.executable, "-m", "rl_placement_ray.doctor", "--address", address, "--json"]


@pytest.mark.dist
def test_doctor_reports_both_nodes_and_an_allreduce_across_them(two_node_cluster):
    out = subprocess.run(_doctor_command(two_node_cluster.address), capture_output=True, text=True, env=two_node_cluster.env, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    result = json.loads(out.stdout[out.stdout.index("{"):])
    nodes = result["nodes"]
    assert len({n["node_id"] for n in nodes}) == 2, nodes
    assert [n["head"] for n in nodes] == [True, False]
    for n in nodes:
        assert n["workers"] == 1
        assert n["versions"]["torch"] == metadata.version("torch")
        assert n["versions"]["ray"] == metadata.version("ray")
        assert n["versions"]["transformers"] == metadata.version("transformers")
        assert n["versions"]["rl-core"] == metadata.version("rl-core")
        assert n["versions"]["python"] == ".".join(map(str, sys.version_info[:3]))
        assert n["devices"]["gpus"] == [] and n["devices"]["cpus"] >= 1
    assert result["missing_nodes"] == [] and result["version_disagreements"] == []
    ar = result["allreduce"]
    assert ar["backend"] == "gloo" and ar["workers"] == 2 and ar["nodes"] == 2 and ar["correct"]
    assert ar["bytes"] == 16 * 2**20 and ar["latency_ms"] > 0 and ar["busbw_gb_s"] == pytest.approx(ar["algbw_gb_s"])  # 2 (n-1)/n = 1 for n = 2
    assert result["ok"]
    for n in nodes:  # what listens where, per node (rl_core.placement.listeners)
        assert any(s["process"] == "raylet" for s in n["listeners"]), n["listeners"]
    text = render(result)
    assert "listening sockets (Ray processes per node" in text
    for n in nodes:
        assert f"({n['node_id'][:8]}, " in text
    assert "all-reduce (gloo, 2 workers on 2 node(s)): sum correct" in text


def test_nodes_that_disagree_are_named():
    mine = versions()
    other = {**mine, "torch": "2.11.0", "an-engine": "0.26.0"}  # an engine only one node has
    lines = disagreements({"node 10.0.0.1 (aaaa)": mine, "node 10.0.0.2 (bbbb)": other, "driver (this machine)": mine})
    assert len(lines) == 2, lines
    torch_line = next(line for line in lines if line.startswith("torch:"))
    assert f"node 10.0.0.1 (aaaa) has {mine['torch']}" in torch_line and "node 10.0.0.2 (bbbb) has 2.11.0" in torch_line
    engine_line = next(line for line in lines if line.startswith("an-engine:"))
    assert "node 10.0.0.1 (aaaa) has not installed" in engine_line and "node 10.0.0.2 (bbbb) has 0.26.0" in engine_line
    assert disagreements({"a": mine, "b": dict(mine)}) == []


def test_listeners_are_listed_per_node_and_exposed_ones_flagged():
    from rl_placement_ray.doctor import render_listeners

    result = {
        "nodes": [{"ip": "10.0.0.1", "node_id": "aaaabbbbcccc", "listeners": [
            {"pid": 7, "process": "raylet", "ip": "::ffff:127.0.0.1", "port": 4000},
            {"pid": 8, "process": "gcs_server", "ip": "::", "port": 6379},
        ]}],
        "driver_listeners": [{"pid": 9, "process": "python rl_core", "ip": "127.0.0.1", "port": 5000}],
    }
    lines = render_listeners(result)
    text = "\n".join(lines)
    assert "node 10.0.0.1 (aaaabbbb):" in text
    assert "pid 7 raylet [::ffff:127.0.0.1]:4000" in text and "4000  <-" not in text
    assert "pid 8 gcs_server [::]:6379  <- reachable from the network" in text
    assert "pid 9 python rl_core 127.0.0.1:5000" in text
