"""The controller's side of a rollout pool of its own: generation requests, weight syncs, staleness.

The schedule core's loop drives (:class:`rl_core.placement.rollout_pool.RolloutSchedule`, made by :func:`make` from
the Plan's rollout-pool card). Step ``k`` with ``async.max_staleness`` = s (versions: :mod:`rl_async.staleness`):

- s = 0: generate step k's prompts with version k-1, update, sync version k (split pools, synchronous);
- s >= 1: step k's batch was requested during step k-1 (version k-2); as soon as it is in, step k+1's prompts
  go to the rollout pool (:meth:`RolloutPipeline.prefetch`) and are generated while the train pool computes
  rewards, log-probs and the update of step k. The sync of version k waits for that generation to finish (the
  rollout workers take one request at a time), so a step takes about max(generation, update) + the sync.
  With one rollout queue the schedule never produces a batch older than 1; s > 1 only widens what is admitted.
- overlapped sync (``async.overlap_sync``; by default on for s >= 1 on the CPU): the train pool copies its weights
  and broadcasts them from a thread, and goes on with the next step at once; the rollout pool receives them as
  the first part of its next generation request, and the receipt is checked when that batch is collected (before
  it is used). A step then takes about max(generation + receive, update + copy).

Checkpoints and the in-flight batch: a checkpoint after step k holds the data loader's position from *before*
step k+1's prompts were drawn; the batch generated for them is not saved. A resumed run draws the same prompts
again and generates them with the checkpoint's weights (staleness 0 for that one step).
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable

import attrs
from rl_core.batch import Batch
from rl_core.placement.contract import ExtensionMethod, WorkerError, WorkerMethod
from rl_core.placement.rollout_pool import RolloutPoolHandle
from rl_core.weight_sync_check import StaleWeightsError, compare_samples

from rl_async.staleness import DROP, USE, StaleBatchError, StalenessGate, batch_version
from rl_async.transfer import member_addresses

logger = logging.getLogger(__name__)

# the worker extension's methods (rl_async.worker.WeightTransfer), each named in the card's ``methods`` (rl_async.plugin)
OPEN_WEIGHT_RENDEZVOUS = ExtensionMethod("open_weight_rendezvous")
JOIN_WEIGHT_GROUP = ExtensionMethod("join_weight_group")
SEND_WEIGHTS = ExtensionMethod("send_weights")
RECEIVE_WEIGHTS = ExtensionMethod("receive_weights")
RECEIVE_AND_GENERATE = ExtensionMethod("receive_and_generate")

# seconds a failed transfer waits for a rollout worker's death to be reported (its sockets close first)
DEATH_GRACE_S = 5.0


@attrs.define
class _Request:
    step: int
    prompts: Batch
    data_state: dict | None  # the loader's position before these prompts were drawn
    version: int | None = None  # the rollout's policy version when generation was asked for
    handle: Any = None
    pad: int = 0
    params: Any = None
    result: Batch | None = None
    receipt: tuple[int, list] | None = None  # (version, the train pool's send reports): received before generating


def make(handle: RolloutPoolHandle) -> RolloutPipeline:
    """The RolloutPoolCard's factory: the schedule of a run's rollout pool, from its ``async.*`` section."""
    cfg, rc = handle.config, handle.config.algorithm.rollout_correction
    if cfg.async_.max_staleness > 0 and rc.rollout_is is None and rc.rollout_rs is None:  # no TIS / rejection reweights them
        logger.warning(
            "async.max_staleness=%d: batches come from weights up to that many updates old and nothing reweights them; "
            "set rollout.calculate_log_probs=true and algorithm.rollout_correction.rollout_is=token (TIS) to correct for it",
            cfg.async_.max_staleness,
        )
    overlap = cfg.async_.overlap_sync
    if overlap is None:
        overlap = cfg.async_.max_staleness >= 1 and cfg.trainer.device == "cpu"
    return RolloutPipeline(
        rollout=handle.rollout, train=handle.train, async_cfg=cfg.async_, split=handle.split, merge=handle.merge, draw=handle.draw,
        loader_state=handle.loader_state, overlap_sync=bool(overlap and cfg.async_.max_staleness >= 1),
    )


class RolloutPipeline:
    """Drives the rollout pool: ``rollout`` / ``train`` are the two pools' placements (``call`` / ``submit``).

    ``split(prompts, params) -> (per-rank args, pad)`` and ``merge(results, pad, params) -> Batch`` are the
    controller's rollout dispatch; ``draw()`` the next prompts, ``loader_state()`` the loader's position.
    """

    def __init__(
        self, *, rollout, train, async_cfg, split: Callable, merge: Callable, draw: Callable[[], Batch], loader_state: Callable[[], dict],
        overlap_sync: bool = False,
    ) -> None:
        self.rollout, self.train = rollout, train
        self.cfg = async_cfg
        self.overlap_sync = overlap_sync
        self._pending: tuple[int, list] | None = None  # a version sent in the background, not yet received
        self._receiving: tuple[int, list, Any] | None = None  # such a version being received on its own (receive_pending)
        self.receive_seconds: float | None = None  # the last overlapped receive (rollout side)
        self.gate = StalenessGate(async_cfg.max_staleness, async_cfg.on_stale)
        self.split, self.merge, self.draw, self.loader_state = split, merge, draw, loader_state
        self.version: int | None = None  # what the rollout pool holds (None: nothing sent yet)
        self._next: _Request | None = None  # prompts drawn (and maybe generating) for a step not yet trained
        self.rendezvous: str | None = None  # where the transfer group met (file://PATH on one node, tcp://HOST:PORT across nodes)

    # ------------------------------------------------------------ transfer
    def start(self) -> None:
        """Form the broadcast group and send policy version 0 (the loop closes the workers if this fails)."""
        self.connect()
        self.sync(0)

    def connect(self) -> None:
        """Form the broadcast group: train rank 0 is its rank 0 (and opens the rendezvous), rollout rank r its rank r + 1."""
        binds = member_addresses(self.train, self.rollout)  # None: one node (FileStore, loopback)
        host = None if binds is None else binds[0]
        size = 1 + self.rollout.world_size
        timeout = self.cfg.sync_timeout_s
        address = self.rendezvous = self.train.call(OPEN_WEIGHT_RENDEZVOUS, [(host, r == 0) for r in range(self.train.world_size)])[0]
        joining = self.rollout.submit(
            JOIN_WEIGHT_GROUP, [(address, 1 + r, size, timeout, binds and binds[1 + r]) for r in range(self.rollout.world_size)]
        )
        try:
            self.train.call(JOIN_WEIGHT_GROUP, [(address, 0 if r == 0 else None, size, timeout, host) for r in range(self.train.world_size)])
        except Exception as exc:
            raise self._named(exc, "join_weight_group") from None
        joining.result()

    def sync(self, version: int) -> float:
        """Send the actor's weights as policy ``version`` and check what every rollout worker holds; seconds."""
        start = time.perf_counter()
        self.drain()  # the rollout workers take one request at a time: a generation in flight finishes first
        bucket_bytes = int(self.cfg.bucket_mb * 2**20)
        if self.overlap_sync:  # sent from a thread; received and checked with the next generation request
            try:
                sent = self.train.call(SEND_WEIGHTS, same_args=(version, bucket_bytes, True))
            except Exception as exc:
                raise self._named(exc, "sync_weights") from None
            self._pending, self.version = (version, sent), version
            return time.perf_counter() - start
        receiving = self.rollout.submit(RECEIVE_WEIGHTS, same_args=(version,))
        try:
            sent = self.train.call(SEND_WEIGHTS, same_args=(version, bucket_bytes))
        except Exception as exc:
            raise self._named(exc, "sync_weights") from None
        check_transfer(version, sent, receiving.result())
        self.version = version
        return time.perf_counter() - start

    def _named(self, exc: Exception, during: str) -> Exception:
        """A train-side failure of a collective with the rollout pool: name the rollout worker that died, if one did."""
        dead_ranks = getattr(self.rollout, "dead_ranks", lambda: [])
        dead, deadline = dead_ranks(), time.monotonic() + DEATH_GRACE_S
        while not dead and time.monotonic() < deadline:  # a killed peer's sockets close before its exit is reported
            time.sleep(0.1)
            dead = dead_ranks()
        if dead:
            rank, code = dead[0]
            where = getattr(self.rollout, "where", None)  # Ray: the node and process; local: this machine
            return WorkerError(
                f"rollout pool rank {rank}" + (f" on {where(rank)}" if where is not None else "") + f" died during {during}"
                + ("" if code is None else f" with exit code {code}" + (" (killed)" if code < 0 else ""))
                + f"; the train pool's side failed with: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
            )
        return exc

    # ---------------------------------------------------------- generation
    def prompts(self, step: int) -> Batch:
        """Step ``step``'s prompts: those drawn for it ahead of time, or the loader's next."""
        if self._next is None or self._next.step != step:
            self._next = _Request(step, None, self.loader_state())
            self._next.prompts = self.draw()
        return self._next.prompts

    def prefetch(self, step: int, params) -> None:
        """Draw step ``step``'s prompts now and start generating them (max_staleness >= 1)."""
        if self.gate.max_staleness < 1:
            return
        self.prompts(step)
        self._submit(self._next, params)

    def receive_pending(self) -> None:
        """Have the rollout pool receive a version sent in the background now, when no generation request follows
        to take it along (the last step: nothing is prefetched). The sender's thread is waiting in the broadcast
        for the rollout pool; left to :meth:`drain` after the train step, it would wait through the whole step
        (longer than ``async.sync_timeout_s`` for a large model) and, on GPUs, hold NCCL work on the train GPU
        that the step's own work may wait for. Checked by :meth:`drain` (or the next generation request)."""
        if self._pending is None or self._receiving is not None or (self._next is not None and self._next.handle is not None):
            return  # nothing sent, already receiving, or a generation in flight (it is collected first)
        (version, sent), self._pending = self._pending, None
        self._receiving = (version, sent, self.rollout.submit(RECEIVE_WEIGHTS, same_args=(version,)))

    def _received(self) -> None:
        """Check a receive started by :meth:`receive_pending` (the rollout workers then take other requests)."""
        if self._receiving is None:
            return
        (version, sent, handle), self._receiving = self._receiving, None
        check_transfer(version, sent, handle.result())

    def _submit(self, req: _Request, params) -> None:
        self._received()  # the rollout workers take one request at a time
        args, req.pad = self.split(req.prompts, params)
        method = WorkerMethod.GENERATE
        if self._pending is not None:  # the version sent in the background is received first, then generated with
            args, method = [(*a, self._pending[0]) for a in args], RECEIVE_AND_GENERATE
            req.receipt, self._pending = self._pending, None
        req.params, req.version, req.result = params, self.version, None
        req.handle = self.rollout.submit(method, args)

    def _collect(self, req: _Request) -> Batch:
        if req.result is None:
            results = req.handle.result()
            req.handle = None
            if req.receipt is not None:  # the weights it was generated with arrived as sent (before the batch is used)
                version, sent = req.receipt
                req.receipt = None
                receipts = [r.meta.pop("weight_receipt", None) for r in results]
                if any(r is None for r in receipts):
                    raise StaleWeightsError(f"weight sync of policy version {version}: a rollout worker generated without reporting its receipt")
                check_transfer(version, sent, receipts)
                self.receive_seconds = max(float(r.get("seconds", 0.0)) for r in receipts)
            req.result = self.merge(results, req.pad, req.params)
            got = batch_version(req.result)
            if got != req.version:
                raise StaleBatchError(
                    f"the rollout pool generated step {req.step}'s batch with policy version {got}, but version {req.version} "
                    "was the last one sent and verified before it was asked for: a weight sync went missing"
                )
        return req.result

    def drain(self) -> None:
        """Wait for a generation in flight (its batch is kept for its step), and complete a sync sent in the
        background that no generation has taken along (received on its own, then checked)."""
        if self._next is not None and self._next.handle is not None:
            self._collect(self._next)
        self._received()
        if self._pending is not None:
            (version, sent), self._pending = self._pending, None
            check_transfer(version, sent, self.rollout.call(RECEIVE_WEIGHTS, same_args=(version,)))

    def batch(self, step: int, params, trainer_version: int) -> tuple[Batch, dict[str, float]]:
        """Step ``step``'s batch, young enough for ``trainer_version``, and its ``async/*`` metrics."""
        req = self._next
        if req is None or req.step != step:
            raise RuntimeError(f"step {step}: no prompts were drawn for it (call prompts({step}) first)")
        if req.handle is None and req.result is None:
            self._submit(req, params)
        batch = self._collect(req)
        while (verdict := self.gate.verdict(batch_version(batch), trainer_version)) != USE:
            if verdict == DROP:  # the next prompts instead, with the current weights
                req = self._next = _Request(step, None, self.loader_state())
                req.prompts = self.draw()
            self._submit(req, params)  # WAIT: the same prompts again, with the current weights
            batch = self._collect(req)
        self._next = None  # trained from here on: a checkpoint after this step saves the loader's own position
        version = batch_version(batch)
        metrics = self.gate.metrics(version, trainer_version)
        if "rollout_seconds" in batch.meta:
            metrics["timing_s/gen_rollout"] = float(batch.meta["rollout_seconds"])
        if self.receive_seconds is not None:  # overlapped sync: the rollout side's receive, load and check
            metrics["timing_s/sync_receive"], self.receive_seconds = self.receive_seconds, None
        return batch, metrics

    def data_state(self) -> dict | None:
        """The loader position a checkpoint saves: before the prompts of a step not trained yet (None: the loader's own)."""
        return None if self._next is None else self._next.data_state

    def close(self) -> None:
        """A sync still in the air is received (the sender's thread waits for it); the transfer group and its
        rendezvous belong to the workers (closed with them)."""
        if self._pending is not None or self._receiving is not None:
            try:
                self.drain()
            except Exception:  # noqa: BLE001 - closing after a failure: the workers report it
                self._pending = self._receiving = None


def check_transfer(version: int, sent: list[dict[str, Any]], received: list[dict[str, Any]]) -> None:
    """Both sides of a sync agree: one train rank sent ``version``, every rollout rank holds it, element for element."""
    senders = [r for r in sent if r.get("sender")]
    if len(senders) != 1 or any(r["version"] != version for r in sent):
        raise StaleWeightsError(f"weight sync of policy version {version}: {len(senders)} train ranks sent weights (expected 1) or a train rank reports another version")
    sender = senders[0]
    for rank, report in enumerate(received):
        if report["version"] != version:
            raise StaleWeightsError(f"rollout pool rank {rank} holds policy version {report['version']} after the sync of version {version}")
        if report["tensors"] != sender["tensors"]:
            raise StaleWeightsError(f"rollout pool rank {rank} received {report['tensors']} tensors of policy version {version}; the train pool sent {sender['tensors']}")
        compare_samples(sender["samples"], report["held"], version=version, where=f"rollout pool rank {rank}")
