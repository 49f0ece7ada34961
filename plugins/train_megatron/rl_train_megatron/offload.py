"""The Megatron backend's offload between phases (``train.options``: verl's ``megatron.param_offload``, ``grad_offload``,
``optimizer_offload``, ``optimizer_cpu_offload``; mixed into :class:`rl_train_megatron.engine.MegatronBackend`). The
mechanisms are rl-offload's, shared with the fsdp backend: :mod:`rl_offload.offload`."""

from __future__ import annotations

import contextlib

import torch
from rl_offload import offload


class Offload:
    """:meth:`on_device` and :meth:`step` over the backend's offload switches; ``offload_log`` records every move."""

    def _send(self, what: str, device: torch.device) -> None:
        if what == "params":
            offload.move_params(self.model, device)
            n = sum(1 for _ in self.model.parameters())
        else:
            n = offload.move_grads(self.model, device)
        self.offload_log.append((what, device.type, n))

    @contextlib.contextmanager
    def on_device(self, phase: str):
        """param_offload / grad_offload: the parameters / gradients on the device for the phase, in host memory after."""
        moved = [w for w, on in (("params", self.param_offload), ("grads", self.grad_offload)) if on]
        if not moved:
            yield
            return
        for what in moved:
            self._send(what, self.device)
        try:
            yield
        finally:
            for what in moved:
                self._send(what, torch.device("cpu"))

    def step(self) -> None:
        """optimizer_cpu_offload: AdamW steps on the host; optimizer_offload: its host-resident state is brought to
        the device a chunk at a time (rl_offload.offload)."""
        if self.optimizer_cpu_offload:
            self.offload_log.append(("optimizer step", "cpu", offload.host_step(self.optimizer, self.offload_fraction)))
        elif self.optimizer_offload:
            self.offload_log.append(("optimizer state", "chunks", offload.streamed_step(self.optimizer, self.device, self.offload_chunk_bytes)))
        elif getattr(self, "native_optimizer", None) is not None:  # megatron-core's DistributedOptimizer (rl_train_megatron.dist_optimizer)
            self.native_optimizer.step()
        else:
            self.optimizer.step()
        if self.zero is not None:  # each owner's updated parameters to the other replicas
            self.zero.broadcast()
        self.zero_grad()
