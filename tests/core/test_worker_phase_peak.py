"""The update's memory peaks the worker reports on CUDA (issue #32): torch's allocated peak and the device-level peak.

They differ while a colocated rollout engine sleeps through cuMem (vLLM's sleep mode: vllm/device_allocator/cumem.py
unmaps each allocation but its tensors stay allocated in torch's MemPool), so the allocated peak counts memory the
device does not hold. The CUDA calls are simulated here (no GPU on the CI machines); the arithmetic is what is tested."""

from __future__ import annotations

from types import SimpleNamespace

import torch
from rl_core.placement.worker import HybridWorker, device_phase_peak

GIB = 2**30


class _FakeCuda:
    """torch.cuda's counters for one phase: a sleeping engine's 36 GiB allocated (unmapped), the trainer's 4 GiB."""

    def __init__(self):
        self.allocated, self.reserved, self.device_used = 40 * GIB, 42 * GIB, 8 * GIB
        self.max_allocated, self.max_reserved = self.allocated, self.reserved

    def grow(self, allocated: int, reserved: int) -> None:  # the update allocates; torch takes new segments
        self.allocated += allocated
        self.reserved += reserved
        self.max_allocated, self.max_reserved = max(self.max_allocated, self.allocated), max(self.max_reserved, self.reserved)

    def install(self, monkeypatch) -> None:
        def reset():
            self.max_allocated, self.max_reserved = self.allocated, self.reserved

        for name, fn in {"max_memory_allocated": lambda: self.max_allocated, "max_memory_reserved": lambda: self.max_reserved,
                         "memory_reserved": lambda: self.reserved, "reset_peak_memory_stats": reset,
                         "mem_get_info": lambda: (80 * GIB - self.device_used, 80 * GIB)}.items():
            monkeypatch.setattr(torch.cuda, name, fn)


def test_the_update_reports_the_device_peak_beside_torch_s_allocated_peak(monkeypatch):
    cuda = _FakeCuda()
    cuda.install(monkeypatch)
    worker = SimpleNamespace(context=SimpleNamespace(device="cuda:0"), _step_peak=0.0)
    with HybridWorker._phase_peak(worker) as peak:
        cuda.grow(10 * GIB, 12 * GIB)  # activations: 2 GiB of the 12 new reserved bytes are fragmentation
        cuda.grow(-10 * GIB, 0)
    allocated, device = peak
    assert allocated == 50  # torch's books: the sleeping engine's 36 GiB included
    assert device == 8 + 12  # the device: in use at the start + torch's new segments
    assert worker._step_peak == 50 * GIB  # the step's peak (perf/max_memory_allocated_gb) is still torch's
    assert device_phase_peak(8 * GIB, 42 * GIB, 41 * GIB) == 8 * GIB  # served from the cache: nothing new on the device
    cpu = SimpleNamespace(context=SimpleNamespace(device="cpu"), _step_peak=0.0)
    with HybridWorker._phase_peak(cpu) as none:
        pass
    assert none == []
