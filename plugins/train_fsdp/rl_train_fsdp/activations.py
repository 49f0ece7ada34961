"""Activation offload (``model.enable_activation_offload``, verl's ``actor_rollout_ref.model.enable_activation_offload``).

During a training forward, every tensor autograd saves for the backward pass (the activations) is copied into
host memory (pinned on CUDA) and the device copy is freed with the forward's graph references; backward copies
each one back to the device it came from when it is needed. Parameters that autograd saves are left where they are
(they live on the device anyway). The gradients are the same: the copies are exact.

On a GPU this trades device memory for host <-> device copies (one each way per saved tensor and micro-batch); it
was not run on a GPU here. On a CPU-only machine the copies are host to host: the same code path runs, so the CPU
tests check the bookkeeping (what was packed, that every packed tensor comes back, identical results).

verl offloads activations layer by layer with its own hooks; this is torch's saved-tensor hooks over the whole
forward (as ``torch.autograd.graph.save_on_cpu``), with counters.
"""

from __future__ import annotations

import torch


class HostActivations(torch.autograd.graph.saved_tensors_hooks):
    """A context: the activations saved inside it live in host memory until backward needs them.

    ``packed`` / ``unpacked`` count tensors, ``packed_bytes`` their size: the numbers the tests check.
    """

    def __init__(self, pin_memory: bool) -> None:
        self.packed = 0
        self.unpacked = 0
        self.packed_bytes = 0

        def pack(t: torch.Tensor):
            if isinstance(t, torch.nn.Parameter) or t.is_sparse:
                return t  # a weight (on its device for the whole pass), not an activation
            # the same strides where t is dense (a transposed activation stays transposed, so backward's kernels see
            # the layout they would have seen: bit-identical gradients); an expanded / overlapping one becomes contiguous
            host = torch.empty_like(t, device="cpu")
            if pin_memory:
                host = torch.empty_strided(host.size(), host.stride(), dtype=t.dtype, device="cpu", pin_memory=True)
            host.copy_(t)
            self.packed += 1
            self.packed_bytes += t.numel() * t.element_size()
            return (t.device, host)

        def unpack(packed):
            if isinstance(packed, torch.Tensor):
                return packed
            device, host = packed
            self.unpacked += 1
            return host.to(device, non_blocking=pin_memory)

        super().__init__(pack, unpack)


def offloaded(enabled: bool, device: torch.device):
    """:class:`HostActivations` for a training forward on ``device`` when ``enabled``, else None (no hooks)."""
    return HostActivations(pin_memory=device.type == "cuda") if enabled else None
