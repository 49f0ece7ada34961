"""Moved: the local placement is :mod:`rl_core.placement.local`, the contract :mod:`rl_core.placement.contract`.

Kept so that ``from rl_core.cluster import LocalCluster, WorkerError`` goes on working.
"""

from __future__ import annotations

from rl_core.placement.contract import WorkerError, after_a_death
from rl_core.placement.local import LocalCluster, local_rendezvous_env, loopback_interface

__all__ = ["LocalCluster", "WorkerError", "after_a_death", "local_rendezvous_env", "loopback_interface"]
