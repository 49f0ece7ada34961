"""run_distributed: results per rank, failures with the rank's traceback, no hangs."""

from __future__ import annotations

import os
import time

import pytest
from rl_core_testing import distributed
from rl_core_testing.distributed import DistributedError, run_distributed


@pytest.fixture(scope="module", autouse=True)
def _spawned_ranks():
    """This file checks the default start (spawn); every other test's ranks start from the root conftest's forkserver."""
    previous = distributed.start_ranks_from(None)
    yield
    distributed.start_ranks_from(previous)


def _sum_ranks(rank, world_size, offset):
    import torch
    import torch.distributed as dist

    x = torch.tensor([float(rank + offset)])
    dist.all_reduce(x)
    return {"rank": rank, "world": world_size, "sum": x.item(), "threads": torch.get_num_threads(), "env": os.environ["RANK"]}


def _fail_on_rank_one(rank, world_size):
    import torch.distributed as dist

    if rank == 1:
        raise ValueError("boom on purpose")
    dist.barrier()  # rank 0 would wait here forever
    return rank


def _sleep_forever(rank, world_size):
    time.sleep(600)


def _die(rank, world_size):
    if rank == 0:
        os._exit(3)
    return rank


@pytest.mark.dist
def test_results_come_back_per_rank():
    out = run_distributed(_sum_ranks, 2, 10)
    assert [o["rank"] for o in out] == [0, 1]
    assert all(o["world"] == 2 and o["sum"] == 21.0 and o["threads"] == 1 for o in out)
    assert [o["env"] for o in out] == ["0", "1"]


@pytest.mark.dist
def test_a_failing_rank_raises_with_its_traceback():
    start = time.monotonic()
    with pytest.raises(DistributedError) as err:
        run_distributed(_fail_on_rank_one, 2, timeout=60)
    msg = str(err.value)
    assert "rank 1" in msg and "boom on purpose" in msg and "_fail_on_rank_one" in msg
    assert time.monotonic() - start < 45


@pytest.mark.dist
def test_timeout_kills_the_ranks():
    with pytest.raises(TimeoutError, match=r"ranks \[0, 1\] did not finish within 3 s"):
        run_distributed(_sleep_forever, 2, timeout=3)


@pytest.mark.dist
def test_a_rank_that_dies_is_reported():
    with pytest.raises(DistributedError, match="exit code 3"):
        run_distributed(_die, 2, timeout=60)


def _env_and_folder(rank, world_size):
    return os.environ.get("RL_CORE_TEST_MARK"), os.getcwd()


@pytest.mark.dist
def test_ranks_from_a_forkserver_get_the_callers_environment_and_folder(rlcore_forkserver, monkeypatch, tmp_path):
    previous = distributed.start_ranks_from(rlcore_forkserver)
    try:
        run_distributed(_env_and_folder, 1)  # the server runs from here on, with the environment and folder of now
        monkeypatch.setenv("RL_CORE_TEST_MARK", "set later")
        monkeypatch.chdir(tmp_path)
        assert run_distributed(_env_and_folder, 2) == [("set later", str(tmp_path))] * 2
    finally:
        distributed.start_ranks_from(previous)
