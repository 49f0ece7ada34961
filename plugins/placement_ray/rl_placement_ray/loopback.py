"""A local Ray instance that listens on loopback only (Ray 2.60's defaults listen on every interface).

Ray 2.60 picks a node's address by asking the routing table which interface
reaches the outside, and its GCS, raylet, object manager and every worker's
gRPC server listen on ``::`` (all interfaces) next to the runtime-env agent on
that external address. ``ray.init(_node_ip_address="127.0.0.1")`` does not
help: Ray rewrites a loopback address into the external one ("so other nodes
can reach it"). With token authentication off those servers accept anyone on
the network, and a Ray worker runs whatever it is sent.

What does work in Ray 2.60: when Ray believes multi-node clusters are
disabled (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, the switch Ray itself uses
on macOS and Windows), the node address is 127.0.0.1 and every server binds
there. The variable is read once, when Ray is imported, so
:func:`start_local` sets both the environment (for the processes ``ray.init``
starts, and the workers they start later) and the already-imported constant,
for the duration of ``ray.init`` only: a later ``ray.init(address=...)`` to a
real cluster in the same process is unaffected. After start-up the node's
address is checked, so a Ray release that changes this is a clear warning,
not a silent exposure.

Opting out: ``ray.node_ip_address`` (an address of this machine) gives the
instance that address, as ``ray start --node-ip-address`` would; joining a
cluster (``ray.address``) leaves binding to whoever started the cluster.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
import threading
import warnings
from typing import Iterator

DISABLE_CLUSTER_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def is_loopback_host(host: str | None) -> bool:
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def exposure_warnings(ray_config) -> list[str]:
    """What a local start would open to the network, one line each (empty: loopback only)."""
    out = []
    node_ip = ray_config.node_ip_address
    if node_ip and not is_loopback_host(node_ip):
        out.append(
            f"ray.node_ip_address={node_ip}: the local Ray instance's servers (GCS, raylet, workers) listen on {node_ip}, "
            "reachable by anyone on that network (Ray runs what it is sent; keep RAY_AUTH_MODE token auth on "
            "or firewall it). Leave ray.node_ip_address unset for loopback only."
        )
    if ray_config.dashboard_host and not is_loopback_host(ray_config.dashboard_host):
        out.append(
            f"ray.dashboard_host={ray_config.dashboard_host}: the Ray dashboard (which can submit jobs, i.e. run code) "
            "is reachable from the network. Leave it 127.0.0.1 and use an SSH tunnel instead."
        )
    return out


@contextlib.contextmanager
def _group_signals_spared() -> Iterator[None]:
    """SIGTERM blocked in this thread while Ray starts its local processes (GCS, raylet, ...), which inherit the mask.

    Ray blocks SIGINT in them itself, not SIGTERM: a scheduler's SIGTERM to the run's whole process group (Slurm's
    scancel, ``kill -TERM -PGID``) killed the GCS under the controller, which then could not save the step and
    exited after 60 s with Ray's "GCS may have been killed". Spared, they live until the controller has saved the step
    and shuts them down itself (they still die with it: Ray's kill-on-parent-death)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def start_local(ray, kwargs: dict, node_ip_address: str | None) -> None:
    """``ray.init(**kwargs)`` for a new local instance, bound to loopback unless ``node_ip_address`` says otherwise;
    its processes spared a SIGTERM to the run's process group (:func:`_group_signals_spared`)."""
    with _group_signals_spared():
        _start_local(ray, kwargs, node_ip_address)


def _start_local(ray, kwargs: dict, node_ip_address: str | None) -> None:
    if node_ip_address and not is_loopback_host(node_ip_address):
        ray.init(**kwargs, _node_ip_address=node_ip_address)
        return
    from ray._private import ray_constants  # noqa: SLF001 - the switch has no public API in Ray 2.60

    saved_env = os.environ.get(DISABLE_CLUSTER_ENV)
    saved_const = getattr(ray_constants, "ENABLE_RAY_CLUSTER", None)
    os.environ[DISABLE_CLUSTER_ENV] = "0"
    if saved_const is not None:
        ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        ray.init(**kwargs)
    finally:
        if saved_env is None:
            os.environ.pop(DISABLE_CLUSTER_ENV, None)
        else:
            os.environ[DISABLE_CLUSTER_ENV] = saved_env
        if saved_const is not None:
            ray_constants.ENABLE_RAY_CLUSTER = saved_const
    node_ip = ray.util.get_node_ip_address()
    if not is_loopback_host(node_ip):
        warnings.warn(
            f"the local Ray instance took the address {node_ip}, not loopback: this Ray release ignores "
            f"{DISABLE_CLUSTER_ENV}=0, so its servers may be reachable from the network (check with rlcore doctor --cluster)",
            RuntimeWarning,
            stacklevel=2,
        )
