"""Where a process group's members meet (rl-placement-ray's groups, rl-async's weight transfer): rank 0 opens a
:class:`Rendezvous`, every member joins it (:func:`join_store`). On one node a ``FileStore`` in a private folder with
gloo / NCCL on loopback; across nodes a ``TCPStore`` on rank 0's Ray address, its socket bound here and handed to the
store, because a store binding its own listens on every interface, unauthenticated.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from datetime import timedelta
from typing import Any

FILE, TCP = "file://", "tcp://"


class Rendezvous:
    """Rank 0's side, kept until the group is formed: a FileStore's private folder (``host`` None), else a socket
    listening on ``host`` (this node's Ray address) at a free port."""

    def __init__(self, host: str | None) -> None:
        self.folder: str | None = None
        self.listener: socket.socket | None = None
        if host is None:
            self.folder = tempfile.mkdtemp(prefix="rl-core-rdzv-")  # 0700: only this user
            self.address = FILE + os.path.join(self.folder, "store")
        else:
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            self.listener = socket.socket(family, socket.SOCK_STREAM)
            self.listener.bind((host, 0))  # this node's Ray address only, a port free there
            self.listener.listen(128)
            self.address = f"{TCP}{host}:{self.listener.getsockname()[1]}" if family == socket.AF_INET else f"{TCP}[{host}]:{self.listener.getsockname()[1]}"

    def close(self) -> None:
        if self.listener is not None:
            self.listener.close()
            self.listener = None
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None


def loopback_interface() -> str:
    """The name of the loopback network interface ("lo" on Linux, "lo0" on macOS)."""
    try:
        names = [name for _, name in socket.if_nameindex()]
    except (OSError, AttributeError):
        names = []
    for name in ("lo", "lo0"):
        if name in names:
            return name
    return next((n for n in names if n.startswith("lo")), "lo")


def join_store(address: str, rank: int, size: int, timeout_s: float, opened: Rendezvous | None = None):
    """The group's store: ``opened`` is the train rank 0's :class:`Rendezvous` (it hosts a TCP store)."""
    import torch.distributed as dist

    if address.startswith(FILE):
        store = dist.FileStore(address[len(FILE):], size)
        # bounds every wait on it (gloo's connection set-up, NCCL's exchange of its unique id): a member that never
        # joins is an error after timeout_s, not a wait of the store's default 5 minutes
        store.set_timeout(timedelta(seconds=timeout_s))
        return store
    if not address.startswith(TCP):
        raise ValueError(f"weight transfer: unknown rendezvous {address!r} (expected {FILE}PATH or {TCP}HOST:PORT)")
    host, _, port = address[len(TCP):].rpartition(":")
    host = host.strip("[]")
    timeout = timedelta(seconds=timeout_s)
    if opened is not None and opened.listener is not None:  # the host: the store takes over the socket bound above
        fd = opened.listener.detach()
        opened.listener = None
        return dist.TCPStore(host, int(port), size, True, timeout, wait_for_workers=False, master_listen_fd=fd)
    return dist.TCPStore(host, int(port), size, False, timeout)


def gloo_device(bind: str | None) -> Any:
    """The gloo device of one member: its node's address (several nodes), else the loopback interface."""
    import torch.distributed as dist

    if bind is None:
        return dist.ProcessGroupGloo.create_device(interface=loopback_interface())
    return dist.ProcessGroupGloo.create_device(hostname=bind)
