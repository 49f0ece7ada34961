"""The Ray worker group on the two-node cluster: placement, collectives, timeouts, no room."""

from __future__ import annotations

import os
import time

import pytest
from rl_placement_ray.config import RayConfig
from rl_core.placement.contract import WorkerError
from rl_core_testing.ray_cluster import free_port
from rl_placement_ray.connect import RayUnavailable, connect
from rl_placement_ray.group import RayWorkerGroup
from rl_placement_ray.pools import PlacementError, ResourcePool


@pytest.fixture
def connected(two_node_cluster, ray_env):
    import ray

    # ray.runtime_env goes to ray.init as it is: every worker of the job gets these variables
    assert connect(RayConfig(address=two_node_cluster.address, runtime_env={"env_vars": {"RLCORE_RUNTIME_ENV_PROBE": "passed"}}))
    try:
        yield two_node_cluster
    finally:
        ray.shutdown()


def sum_of_ranks(info):
    import torch
    import torch.distributed as dist

    x = torch.tensor([float(info["rank"] + 1)])
    dist.all_reduce(x)
    return {
        "sum": x.item(), "node": info["node_id"], "rank": info["rank"], "world": dist.get_world_size(), "backend": dist.get_backend(),
        "env": os.environ.get("RLCORE_RUNTIME_ENV_PROBE"), "threads": torch.get_num_threads(),
    }


def rank_one_stalls(info, seconds):
    import time

    import torch
    import torch.distributed as dist

    if info["rank"] == 1:
        time.sleep(seconds)  # never joins the all-reduce in time
        return None
    x = torch.ones(1)
    dist.all_reduce(x)
    return x.item()


@pytest.mark.dist
def test_one_rank_per_node_in_a_gloo_group_whose_timeout_names_it(connected):
    group = RayWorkerGroup(ResourcePool(("probe",), 2, 1, "cpu", 0.5), collective_timeout_s=3, start_timeout_s=60, threads=1)
    try:
        out = group.run(sum_of_ranks)
    except BaseException:
        group.close()
        raise
    assert [o["rank"] for o in out] == [0, 1]
    assert [o["sum"] for o in out] == [3.0, 3.0]  # 1 + 2 on both ranks
    assert {o["world"] for o in out} == {2} and {o["backend"] for o in out} == {"gloo"}
    assert out[0]["node"] != out[1]["node"], "STRICT_SPREAD must put the ranks on different nodes"
    assert [o["env"] for o in out] == ["passed", "passed"] and [o["threads"] for o in out] == [1, 1]

    # rank 1 never joins the next all-reduce: rank 0 times out after 3 s, and the group ends
    start = time.monotonic()
    with pytest.raises(WorkerError) as info:
        group.run(rank_one_stalls, 60)
    took = time.monotonic() - start
    text = str(info.value)
    assert "rank 0 [probe]" in text and "process group 'workers' (gloo, 2 ranks" in text, text
    assert "timed out after 3 s during rank_one_stalls" in text and "ray.collective_timeout_s" in text, text
    assert "ranks [1] were stopped" in text, text
    assert took < 30, f"took {took:.0f} s for a 3 s collective timeout"
    assert group.actors == [] and group.pool.groups == []


@pytest.mark.dist
def test_no_room_is_an_error_listing_the_nodes(connected):
    with pytest.raises(PlacementError) as info:
        RayWorkerGroup(ResourcePool(("actor", "rollout"), 3, 1, "cpu", 1.0), collective_timeout_s=60, start_timeout_s=3)
    text = str(info.value)
    assert "trainer.nnodes=3 x trainer.n_gpus_per_node=1" in text and "within 3 s (ray.start_timeout_s)" in text, text
    assert text.count("1 CPU, 0 GPU") == 2, text  # both nodes listed with what they have


def test_unreachable_address_is_a_user_error(ray_env):
    import ray

    port = free_port()
    with pytest.raises(RayUnavailable, match=r"cannot reach the Ray cluster at ray.address='127.0.0.1:\d+'"):
        connect(RayConfig(address=f"127.0.0.1:{port}"))
    assert not ray.is_initialized()


def test_ray_mode_without_ray_says_how_to_install_it(monkeypatch):
    import sys

    from rl_placement_ray.connect import import_ray

    monkeypatch.setitem(sys.modules, "ray", None)  # what `import ray` does where Ray is not installed
    with pytest.raises(RayUnavailable, match=r"trainer.placement=ray needs Ray .*pip install 'ray==2.60.\*'.*trainer.placement=local"):
        import_ray()
