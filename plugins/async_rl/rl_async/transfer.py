"""Weights from the train pool to the rollout pool: a broadcast group of their own, bucketed, versioned.

The train pool's rank 0 (group rank 0) and every rollout worker (group ranks 1..R) join a process group that
belongs to neither pool (gloo on the CPU, NCCL on GPUs; on one node a FileStore rendezvous in a private folder and
sockets on the loopback interface, across Ray nodes a TCP store hosted by the train pool's rank 0 on its node's Ray
address: :mod:`rl_core.placement.rendezvous`, :func:`member_addresses`). A sync sends the actor's named weights (after the rollout card's converter, if any) in
buckets of about ``async.bucket_mb``: per bucket one header (a JSON list of names, shapes, dtypes; sent as bytes,
never unpickled) and one flat byte buffer. The receivers rebuild the tensors, load them into their engine and
report back what their engine holds at the positions of :mod:`rl_core.weight_sync_check`; the controller compares
both sides (:func:`rl_async.pipeline.check_transfer`). Every op of the group times out after
``async.sync_timeout_s``: a dead or stuck peer ends the sync with an error instead of a hang.
"""

from __future__ import annotations

import json
import os
import threading
import time
from datetime import timedelta
from typing import Any, Iterable, Iterator

import torch
from rl_core.placement.rendezvous import Rendezvous, gloo_device, join_store, loopback_interface
from rl_core.weight_sync_check import WeightTap, verify_sent, verify_sync

_DTYPES = {str(d): d for d in (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32, torch.int8, torch.uint8, torch.bool)}


class TransferGroup:
    """One member of the train -> rollout broadcast group (rank 0 sends, the others receive)."""

    def __init__(
        self, address: str, rank: int, size: int, *, timeout_s: float, device: str = "cpu", bind: str | None = None, opened: Rendezvous | None = None,
    ) -> None:
        """``address``: the rendezvous (``file://PATH`` or ``tcp://HOST:PORT``); ``bind``: this member's node
        address when the group spans nodes (None: loopback); ``opened``: the host's :class:`Rendezvous`."""
        import torch.distributed as dist

        self.rank, self.size = rank, size
        self.opened = opened
        self._sending: threading.Thread | None = None  # a background send (send_in_background)
        self._failure: BaseException | None = None
        self._send_stream = None  # CUDA: the background send's own stream (send_in_background)
        self.timeout = timedelta(seconds=timeout_s)
        self.device = member_device(device)
        if self.device.type == "cuda" and bind is None:
            # one node: NCCL's bootstrap sockets on the loopback interface, as the workers' own groups (placement.local);
            # read when this process first starts NCCL, so set before the group's first collective. Across nodes NCCL
            # picks the interface itself (no address-to-interface lookup here).

            os.environ.setdefault("NCCL_SOCKET_IFNAME", loopback_interface())
        store = join_store(address, rank, size, timeout_s, opened)
        if self.device.type == "cuda":  # GPUs: NCCL (not run on this CPU machine: bench/two_gpu runs it on two GPUs)
            torch.cuda.set_device(self.device)  # NCCL's communicator and its stream on this member's GPU
            opts = dist.ProcessGroupNCCL.Options()
            opts._timeout = self.timeout
            self.pg = dist.ProcessGroupNCCL(store, rank, size, opts)
        else:
            opts = dist.ProcessGroupGloo._Options()
            opts._timeout = self.timeout
            opts._devices = [gloo_device(bind)]
            self.pg = dist.ProcessGroupGloo(store, rank, size, opts)

    def _bcast(self, tensor: torch.Tensor) -> torch.Tensor:
        """Broadcast from group rank 0. The wait is bounded and blocks this thread until the op is done (NCCL's
        plain wait() only orders the current stream after it, and a later ``.item()`` would then block without a
        bound): a dead or stuck peer raises here after ``async.sync_timeout_s``. Work queued on the current stream
        afterwards (the receiver's copies out of the bucket) runs after the broadcast."""
        if tensor.numel() == 0:  # both sides know the size: nothing to send
            return tensor
        try:
            if not self.pg.broadcast(tensor, 0).wait(self.timeout):  # a backend may report the timeout as False
                raise TimeoutError("the broadcast's wait returned False")
        except Exception as exc:  # noqa: BLE001 - one message naming the group, the side and the bound
            side = "train pool (sender)" if self.rank == 0 else f"rollout pool rank {self.rank - 1} (receiver)"
            raise RuntimeError(
                f"weight transfer: a broadcast of {tensor.numel() * tensor.element_size()} bytes on {self.device} failed or did not finish "
                f"within async.sync_timeout_s={self.timeout.total_seconds():g} s on the {side}: a peer died or is stuck "
                f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
            ) from exc
        return tensor

    def _bcast_bytes(self, payload: bytes | None) -> bytes:
        n = self._bcast(torch.tensor([len(payload) if payload is not None else 0], dtype=torch.int64, device=self.device))
        buf = torch.empty(int(n.item()), dtype=torch.uint8, device=self.device)
        if payload is not None and buf.numel():
            buf.copy_(torch.frombuffer(bytearray(payload), dtype=torch.uint8))
        return bytes(self._bcast(buf).cpu().numpy()) if buf.numel() else b""

    # ------------------------------------------------------------------ send
    def send(self, weights: Iterable[tuple[str, torch.Tensor]], *, bucket_bytes: int) -> tuple[int, int]:
        """Broadcast ``weights`` (group rank 0), one bucket at a time; returns (tensors, bytes) sent."""
        self.wait_sent()
        return self._send_packed(_packed(weights, bucket_bytes, self.device))

    def send_in_background(self, weights: Iterable[tuple[str, torch.Tensor]], *, bucket_bytes: int) -> tuple[int, int]:
        """Copy ``weights`` into their buckets now (a snapshot: the caller may change them as soon as this returns)
        and broadcast them from a thread; (tensors, bytes) as :meth:`send`. A failure is raised by the next
        :meth:`wait_sent` (the next send, or close). Costs one copy of the weights in the sender's memory."""
        self.wait_sent()
        packed = list(_packed(weights, bucket_bytes, self.device))
        counts = (sum(n for _, _, n in packed), sum(flat.numel() for _, flat, _ in packed))
        packed_at = None
        if self.device.type == "cuda":  # the buckets are copied on the caller's stream: the sender's starts after that
            packed_at = torch.cuda.Event()
            packed_at.record(torch.cuda.current_stream(self.device))

        def run() -> None:
            try:
                if self.device.type != "cuda":
                    self._send_packed(packed)
                    return
                # the current GPU is per thread (a new one starts on cuda:0): NCCL's stream and the header tensors on
                # this member's GPU. And a stream of the sender's own: each broadcast's wait() makes the calling
                # thread's current stream wait for the broadcast, and the default stream is shared with the caller's
                # thread, so the train step's GPU work would queue behind a broadcast that ends only once the rollout
                # pool receives, which it may do only after that train step (the last step: a hang, issue #36)
                torch.cuda.set_device(self.device)
                if self._send_stream is None:
                    self._send_stream = torch.cuda.Stream(self.device)
                self._send_stream.wait_event(packed_at)
                with torch.cuda.stream(self._send_stream):
                    self._send_packed(packed)
            except BaseException as exc:  # noqa: BLE001 - raised in the caller's thread by wait_sent
                self._failure = exc

        self._sending = threading.Thread(target=run, name="rl-core-weight-send", daemon=True)
        self._sending.start()
        return counts

    def wait_sent(self, timeout: float | None = None) -> None:
        """Wait for a background send (:meth:`send_in_background`) and raise what it failed with."""
        thread = self._sending
        if thread is None:
            return
        thread.join(timeout)
        if thread.is_alive():
            raise TimeoutError(f"weight transfer: the background send did not finish within {timeout} s")
        self._sending = None
        if self._failure is not None:
            failure, self._failure = self._failure, None
            raise failure

    def _send_packed(self, packed: Iterable[tuple[bytes, torch.Tensor, int]]) -> tuple[int, int]:
        tensors = total = 0
        for header, flat, n in packed:
            self._bcast_bytes(header)
            self._bcast(flat)
            tensors, total = tensors + n, total + flat.numel()
        self._bcast_bytes(json.dumps({"tensors": [], "last": True}).encode())
        return tensors, total

    # --------------------------------------------------------------- receive
    def receive(self) -> Iterator[tuple[str, torch.Tensor]]:
        """The tensors rank 0 sends, bucket by bucket, on this member's device (each in storage of its own)."""
        while True:
            header = json.loads(self._bcast_bytes(None).decode())
            if header["last"]:
                return
            specs = [(name, tuple(shape), _dtype(dtype)) for name, shape, dtype in header["tensors"]]
            sizes = [_numel(shape) * torch.empty((), dtype=dt).element_size() for _, shape, dt in specs]
            flat = self._bcast(torch.empty(sum(sizes), dtype=torch.uint8, device=self.device))
            offset = 0
            for (name, shape, dt), n in zip(specs, sizes):
                # a copy of its own: aligned for its dtype whatever precedes it, and the bucket buffer can go
                yield name, flat[offset : offset + n].clone().view(dt).reshape(shape)
                offset += n

    def close(self) -> None:
        try:
            self.wait_sent(self.timeout.total_seconds())
        except BaseException:  # noqa: BLE001 - closing: the peer's side reports the failed sync
            pass
        shutdown = getattr(self.pg, "shutdown", None)
        if shutdown is not None:
            try:
                shutdown()
            except Exception:  # noqa: BLE001 - a peer already gone
                pass
        if self.opened is not None:
            self.opened.close()
            self.opened = None


def member_device(device: str) -> torch.device:
    """This member's device: ``cpu``, or the worker's GPU (``cuda:N`` as its context names it; a bare ``cuda`` is
    the current one). A pool's worker on a machine's second GPU is ``cuda:1`` (local placement: every process sees
    every GPU); a Ray actor sees only its own, ``cuda:0``."""
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    return dev


def member_addresses(train, rollout) -> list[str] | None:
    """The Ray node address of each member (train rank 0, then rollout ranks 0..R-1) when they span several
    nodes; None when they share one (or the placement does not say: local processes on this machine)."""
    train_at, rollout_at = getattr(train, "placement", None), getattr(rollout, "placement", None)
    if not train_at or not rollout_at:
        return None
    members = [train_at[0], *rollout_at]
    if len({m["node_id"] for m in members}) == 1:
        return None
    return [m["ip"] for m in members]


def _dtype(name: str) -> torch.dtype:
    if name not in _DTYPES:
        raise ValueError(f"weight transfer: the train pool sent a tensor of dtype {name}, which the rollout pool does not rebuild")
    return _DTYPES[name]


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _as_bytes(t: torch.Tensor) -> torch.Tensor:
    t = t.detach().contiguous().reshape(-1)
    return t.view(torch.uint8) if t.numel() else torch.empty(0, dtype=torch.uint8, device=t.device)


def _packed(weights: Iterable[tuple[str, torch.Tensor]], bucket_bytes: int, device: torch.device) -> Iterator[tuple[bytes, torch.Tensor, int]]:
    """Per bucket: its header (JSON bytes: names, shapes, dtypes), its tensors as one flat byte buffer, their count."""
    for bucket in _buckets(weights, bucket_bytes):
        header = [(name, list(t.shape), str(t.dtype)) for name, t in bucket]
        flat = torch.cat([_as_bytes(t.to(device)) for _, t in bucket])
        yield json.dumps({"tensors": header, "last": False}).encode(), flat, len(bucket)


def _buckets(weights: Iterable[tuple[str, torch.Tensor]], bucket_bytes: int) -> Iterator[list[tuple[str, torch.Tensor]]]:
    bucket: list[tuple[str, torch.Tensor]] = []
    size = 0
    for name, t in weights:
        bucket.append((name, t))
        size += t.numel() * t.element_size()
        if size >= bucket_bytes:
            yield bucket
            bucket, size = [], 0
    if bucket:
        yield bucket


# ------------------------------------------------------------------ worker side
def send_weights(
    group: TransferGroup | None, weights: Iterable[tuple[str, torch.Tensor]], *, version: int, bucket_bytes: int,
    trainer_sample=None, engine_name: str = "rollout", background: bool = False,
) -> dict[str, Any]:
    """The train side of a sync: every train rank reads its weights (a sharded backend gathers them), rank 0 of
    the group sends; the report holds the version and the sampled elements the rollout side is checked against.
    ``trainer_sample(positions)``: the trained policy at those positions, to check that what was sent is it
    (:func:`rl_core.weight_sync_check.verify_sent`: LoRA adapters merged, no old copy). ``background``: the
    weights are copied now and broadcast from a thread (:meth:`TransferGroup.send_in_background`), so the
    train pool goes on with the next step while the rollout pool receives."""

    start = time.perf_counter()
    tap = WeightTap(weights)
    if group is None:  # a train rank outside the group: its part of the gather only
        for _ in tap:
            pass
        if trainer_sample is not None:  # on every train rank alike (a sharded backend's view may be collective)
            verify_sent(tap, trainer_sample(tap.positions), engine_name=engine_name, version=version)
        return {"version": version, "sender": False}
    send = group.send_in_background if background else group.send
    tensors, nbytes = send(tap, bucket_bytes=bucket_bytes)
    if trainer_sample is not None:
        verify_sent(tap, trainer_sample(tap.positions), engine_name=engine_name, version=version)
    return {"version": version, "sender": True, "samples": tap.values, "tensors": tensors, "bytes": nbytes, "seconds": time.perf_counter() - start}


def receive_weights(group: TransferGroup, engine: Any, *, version: int, engine_name: str) -> dict[str, Any]:
    """The rollout side: receive, load into ``engine``, and report what the engine holds (or, for an engine that
    cannot be asked, what arrived) at the checked positions."""

    start = time.perf_counter()
    received = list(group.receive())
    tap = WeightTap(received)
    engine.load_weights(tap)
    held = None
    if hasattr(engine, "sample_weights"):
        verify_sync(tap, engine, engine_name=engine_name, version=version)  # the engine holds what arrived
        held = engine.sample_weights(tap.positions)
    if held is None:
        held = tap.values
    return {"version": version, "held": held, "tensors": len(received), "seconds": time.perf_counter() - start}

