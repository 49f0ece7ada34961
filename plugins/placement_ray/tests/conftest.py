"""Fixtures of rl-placement-ray's tests: a real two-node Ray cluster on this machine
(:class:`rl_core_testing.ray_cluster.TwoNodeCluster`), shared by the session, and Ray's environment for a test.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from rl_core_testing.ray_cluster import NEEDS_RAY, RAY_ENV, TwoNodeCluster


@pytest.fixture(scope="session")
def two_node_cluster(tmp_path_factory):
    pytest.importorskip("ray", reason=NEEDS_RAY)
    # the workers import this folder's test modules: their probe functions travel by reference (test_ray_group.py)
    cluster = TwoNodeCluster(tmp_path_factory.mktemp("ray_cluster"), pythonpath=(Path(__file__).parent,))
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def ray_env(monkeypatch):
    pytest.importorskip("ray", reason=NEEDS_RAY)
    for k, v in RAY_ENV.items():
        monkeypatch.setenv(k, v)
