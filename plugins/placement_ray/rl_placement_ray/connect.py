"""Reaching Ray: import it with a clear message, start a local instance or join a cluster.

``ray.address`` decides (docs/ray.md):

- null: the cluster in ``$RAY_ADDRESS`` (``ray job submit`` sets it for the
  job's driver), else a new local Ray instance on this machine, with
  ``ray.num_cpus`` CPUs and the dashboard bound to ``ray.dashboard_host``
  (127.0.0.1 unless configured: the dashboard can run code, so it is not
  opened to the network by default). Every server of that instance (GCS,
  raylet, object manager, agents, each worker's gRPC port) binds loopback
  only (:mod:`~rl_placement_ray.loopback`), because Ray's servers are
  unauthenticated when token auth is off; ``ray.node_ip_address`` opts into
  another address, with a warning;
- ``auto``: the cluster started on this machine with ``ray start`` (a
  recorded head that no longer answers is an error at once, not a wait);
- ``host:port``: the head node's GCS address (``ray start --head --port``).

``ray.runtime_env`` goes to ``ray.init`` as it is (``env_vars``, ``pip``,
``working_dir``, ...), so every worker of the job gets it.
"""

from __future__ import annotations

import logging
import os
import socket
import sys

from rl_core.problems import UserError

from rl_placement_ray.loopback import exposure_warnings, start_local


class RayUnavailable(UserError):
    """Ray is not installed, or the cluster named by ray.address cannot be reached."""


def import_ray():
    try:
        import ray
    except ImportError as exc:
        raise RayUnavailable(
            "trainer.placement=ray needs Ray on this machine and on every node of the cluster: "
            "pip install 'ray==2.60.*' (or set trainer.placement=local to run without Ray)"
        ) from exc
    return ray


def connect(ray_config, *, log_level: int = logging.WARNING) -> bool:
    """Join (or start) the Ray cluster ``ray_config`` names; True when this call connected.

    False means Ray was already initialised in this process (a notebook, a
    test, a caller of the library): that connection is used and left open.
    """
    ray = import_ray()
    if ray.is_initialized():
        return False
    address = ray_config.address or os.environ.get("RAY_ADDRESS") or None
    kwargs: dict = {"namespace": ray_config.namespace, "logging_level": log_level}
    if ray_config.runtime_env:
        kwargs["runtime_env"] = dict(ray_config.runtime_env)
    if address:
        _check_reachable(_resolve_auto(address) if address == "auto" else address)
        kwargs["address"] = address
    else:
        # "local": a new instance even when a cluster `ray start` made earlier is recorded on this machine
        # (a stale record makes a bare ray.init() wait forever for a head that is gone)
        kwargs.update(address="local", num_cpus=ray_config.num_cpus, dashboard_host=ray_config.dashboard_host)
        for line in exposure_warnings(ray_config):
            print(f"warning: {line}", file=sys.stderr, flush=True)
    try:
        if address:
            ray.init(**kwargs)
        else:
            start_local(ray, kwargs, ray_config.node_ip_address)
    except ConnectionError as exc:
        raise RayUnavailable(
            f"cannot reach the Ray cluster at ray.address={address!r}: {exc}\n"
            "fix: start it first (`ray start --head` on the head node, docs/ray.md), or pass the head's "
            "address as ray.address=HOST:PORT, or leave ray.address unset to start a local Ray instance"
        ) from None
    return True


def _resolve_auto(address: str) -> str:
    """``auto`` -> the head address Ray recorded on this machine (``auto`` again if it cannot tell)."""
    try:
        from ray._private.services import canonicalize_bootstrap_address_or_die

        return canonicalize_bootstrap_address_or_die(address)
    except ConnectionError:
        raise RayUnavailable(
            "ray.address=auto, but no Ray cluster was started on this machine\n"
            "fix: `ray start --head` first (docs/ray.md), give the head's address as ray.address=HOST:PORT, "
            "or leave ray.address unset to start a local Ray instance"
        ) from None
    except Exception:  # noqa: BLE001 - a private helper: if it moved, let ray.init decide
        return address


def _check_reachable(address: str, timeout_s: float = 10.0) -> None:
    """A ``host:port`` nobody listens on fails here at once: ``ray.init`` would retry it forever."""
    if address == "auto" or "://" in address or ":" not in address:
        return
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            return
    except ValueError:
        raise RayUnavailable(f"ray.address={address!r} is not HOST:PORT (e.g. 10.0.0.1:6379), 'auto', or unset") from None
    except OSError as exc:
        raise RayUnavailable(
            f"cannot reach the Ray cluster at ray.address={address!r}: nothing answers on {host}:{port} ({exc})\n"
            "fix: start the head first (`ray start --head --port PORT`, docs/ray.md) and give its address, "
            "or leave ray.address unset to start a local Ray instance"
        ) from None


def alive_nodes() -> list[dict]:
    """``ray.nodes()`` entries of the nodes that are up, the head first, then by address."""
    import ray

    nodes = [n for n in ray.nodes() if n.get("Alive")]
    return sorted(nodes, key=lambda n: ("node:__internal_head__" not in n.get("Resources", {}), n.get("NodeManagerAddress", ""), n["NodeID"]))


def node_addresses() -> dict[str, str]:
    """node id -> the address the node registered with Ray (``ray start --node-ip-address``; 127.0.0.1 for the
    loopback-only local instance). Not what a worker's routing table says: that is the machine's external address
    even on a node that Ray runs on loopback."""
    return {n["NodeID"]: n.get("NodeManagerAddress") for n in alive_nodes() if n.get("NodeManagerAddress")}


def describe_resources() -> str:
    """What the cluster has, node by node: for errors that say it lacks room."""
    lines = []
    for n in alive_nodes():
        res = n.get("Resources", {})
        lines.append(
            f"  node {n.get('NodeManagerAddress')} ({n['NodeID'][:8]}): {res.get('CPU', 0):g} CPU, {res.get('GPU', 0):g} GPU"
        )
    return "\n".join(lines) or "  (no node is up)"
