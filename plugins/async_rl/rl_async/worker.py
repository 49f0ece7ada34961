"""The workers' side of a rollout pool of its own: the train -> rollout weight transfer, as the worker extension of the
Plan's rollout-pool card (:mod:`rl_core.placement.rollout_pool`). Every worker of both pools builds one
(:class:`WeightTransfer`); the controller (:mod:`rl_async.pipeline`) calls its methods by name."""

from __future__ import annotations

from typing import Any

from rl_core.placement.rendezvous import Rendezvous

from rl_async.transfer import TransferGroup, receive_weights, send_weights


class WeightTransfer:
    """One worker's part of the train -> rollout broadcast group (``worker``: the HybridWorker it extends)."""

    def __init__(self, worker: Any) -> None:
        self.worker = worker
        self._transfer: TransferGroup | None = None  # the broadcast group (rl_async.transfer), once joined
        self._rendezvous: Rendezvous | None = None  # its rendezvous while the group forms (train rank 0)
        converter = worker.stack.converter
        self._convert = converter.load() if converter is not None else None  # the rollout card's converter, as the colocated sync

    def open_weight_rendezvous(self, host: str | None, opens: bool) -> str | None:
        """Train pool (``opens`` on its rank 0): open the transfer group's rendezvous; its address for the others.
        ``host``: this node's address when the group spans nodes (a TCP store there), None: a FileStore here."""
        if not opens:
            return None
        self._rendezvous = Rendezvous(host)
        return self._rendezvous.address

    def join_weight_group(self, address: str, rank: int | None, size: int, timeout_s: float, bind: str | None = None) -> None:
        """Join the train -> rollout broadcast group (train rank 0 and every rollout worker; ``rank`` None: not a
        member); ``bind``: this worker's node address when the group spans nodes (None: loopback)."""
        if rank is None:
            self._transfer = None
            return
        opened, self._rendezvous = self._rendezvous, None
        self._transfer = TransferGroup(address, rank, size, timeout_s=timeout_s, device=self.worker.context.device, bind=bind, opened=opened)

    def send_weights(self, version: int, bucket_bytes: int, background: bool = False) -> dict[str, Any]:
        """Train pool: send the actor's weights as policy ``version`` (a report for the controller's check);
        ``background``: copied now, broadcast from a thread while the next step runs."""
        actor, config = self.worker.actor, self.worker.stack.config
        weights = actor.named_weights()
        if self._convert is not None:
            weights = self._convert(weights, config)
        # the trainer's own view is in its names: checked against what was sent only without a converter (as the colocated sync)
        return send_weights(self._transfer, weights, version=version, bucket_bytes=bucket_bytes, background=background,
                            trainer_sample=actor.sample_weights if self._convert is None else None, engine_name=config.rollout.name)

    def receive_weights(self, version: int) -> dict[str, Any]:
        """Rollout pool: receive policy ``version`` into the engine; what the engine holds comes back to be checked.
        (A rollout pool's engine never sleeps: nothing to wake.)"""
        report = receive_weights(self._transfer, self.worker.rollout, version=version, engine_name=self.worker.stack.config.rollout.name)
        self.worker.weight_version = version
        return report

    def receive_and_generate(self, batch: Any, params: Any, version: int) -> Any:
        """Rollout pool: receive policy ``version`` (sent in the background), then generate with it; the receipt
        rides back in ``meta["weight_receipt"]``, checked before the batch is used."""
        receipt = self.receive_weights(version)
        out = self.worker.generate(batch, params)
        out.meta["weight_receipt"] = receipt
        return out

    def close(self) -> None:
        """Close the transfer group and its rendezvous (both, even if the first raises)."""
        transfer, rendezvous, self._transfer, self._rendezvous = self._transfer, self._rendezvous, None, None
        try:
            if transfer is not None:
                transfer.close()
        finally:
            if rendezvous is not None:
                rendezvous.close()
