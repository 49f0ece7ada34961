"""CPU offload between phases, for train backends (issue #32; the Megatron switches: issue #37).

The fsdp backend's ``actor.fsdp_config.param_offload`` / ``optimizer_offload`` on one device and the megatron
backend's ``train.options.{param,grad,optimizer}_offload`` / ``optimizer_cpu_offload`` (verl's names) use these.

param offload (:func:`move_params`)
    The model's parameters and buffers live in host memory between phases (an inference pass, an update) and
    are copied to the device for the phase, so the rollout engine has the device to itself while it generates.

grad offload (:func:`move_grads`)
    Gradients left between phases are kept in host memory. rl-core's backends clear the gradients at every
    optimizer step, so after a complete update there are none to move; the move is there for what is left.

optimizer offload (:func:`streamed_step`)
    AdamW's state lives in host memory always. The optimizer step runs in chunks of parameters: a chunk's state is
    copied to the device, torch's own AdamW steps those parameters, and the state goes back; so the device never
    holds more than one chunk of the state (a 7B full fine-tune's 56 GB of AdamW state never sits on one 80 GB GPU).

optimizer CPU offload (:func:`host_step`)
    megatron-core's ``optimizer_cpu_offload``: AdamW's state lives in host memory and the step runs there too: each
    parameter and its gradient are copied to host buffers, stepped by the CPU, and the parameter copied back.

AdamW is element-wise: every variant's update is the one without offload. Host buffers are allocated once (pinned
on CUDA) and reused at every phase. Pinned buffers are carved from segments of ``SEGMENT_BYTES`` (1 GiB,
:class:`HostArena`): torch's pinned allocator rounds every allocation up to a power of two, which for a 7B model's
float32 tensors (an MLP weight of 272 MB takes 512 MB) made the pinned parameters and AdamW state 1.8x their size
(147 GB of host memory for 82 GB of state: the OOM killer ended the 7B offload run on a 125 GiB host). On a CPU-only machine the copies are host to host: the same code runs, so the
CPU tests see the whole path (what moves, and that the results do not change); none of it was run on a GPU here.
"""

from __future__ import annotations

from typing import Iterator

import torch

CHUNK_BYTES = 1 << 30  # optimizer state brought to the device at once
SEGMENT_BYTES = 1 << 30  # pinned host memory allocated at once (a power of two: torch's pinned allocator rounds to one)
ALIGN = 512


class HostArena:
    """Host buffers carved out of large segments (pinned when ``pin``), first fit, never freed while it lives.

    A tensor larger than a segment gets a segment of its own, rounded up to a power of two (what the pinned
    allocator would take anyway); the rest of that segment serves later tensors."""

    def __init__(self, pin: bool, segment_bytes: int = SEGMENT_BYTES) -> None:
        self.pin = pin
        self.segment_bytes = segment_bytes
        self.segments: list[list] = []  # [uint8 tensor, bytes used]

    @property
    def reserved(self) -> int:
        return sum(seg.numel() for seg, _ in self.segments)

    def take(self, shape: torch.Size, dtype: torch.dtype) -> torch.Tensor:
        numel = 1
        for n in shape:
            numel *= int(n)
        nbytes = numel * torch.empty((), dtype=dtype).element_size()
        if nbytes == 0:
            return torch.empty(shape, dtype=dtype)
        need = -(-nbytes // ALIGN) * ALIGN
        slot = next((s for s in self.segments if s[0].numel() - s[1] >= need), None)
        if slot is None:
            size = self.segment_bytes if need <= self.segment_bytes else 1 << (need - 1).bit_length()
            slot = [torch.empty(size, dtype=torch.uint8, pin_memory=self.pin), 0]
            self.segments.append(slot)
        start = slot[1]
        slot[1] += need
        return slot[0][start : start + nbytes].view(dtype).view(shape)


def _to(t: torch.Tensor, device: torch.device, cache: dict, key) -> torch.Tensor:
    """``t`` copied to ``device``; to the host into a buffer kept in ``cache`` under ``key`` (allocated, and pinned on
    CUDA, once: pinning tens of GB at every phase would cost more than the copy; pinned ones from a :class:`HostArena`)."""
    if device.type != "cpu":
        return t.detach().to(device, copy=True, non_blocking=True)
    host = cache.get(key)
    if host is None or host.shape != t.shape or host.dtype != t.dtype:
        if t.is_cuda or "arena" in cache:  # an arena put in the cache beforehand (tests: unpinned) is used on CPU too
            arena = cache.setdefault("arena", HostArena(pin=True))
            host = arena.take(t.shape, t.dtype)
        else:  # host to host (CPU runs): no pinning, no rounding
            host = torch.empty(t.shape, dtype=t.dtype, device="cpu")
        cache[key] = host
    if host.data_ptr() != t.data_ptr():
        host.copy_(t.detach())
    return host


def own_storage(t: torch.Tensor) -> torch.Tensor:
    """``t`` on a storage of exactly its own bytes, sharing its memory (no copy): a view into a :class:`HostArena`
    segment otherwise looks like a slice of a 1 GiB storage, which writers copy or refuse (torch's DCP writer clones
    such a tensor and keeps every clone until its file is closed: the whole offloaded state twice on the host).
    Anything else (a device tensor, a DTensor, a tensor that owns its storage) is returned as it is."""
    if type(t) not in (torch.Tensor, torch.nn.Parameter) or t.device.type != "cpu" or not t.is_contiguous():
        return t
    nbytes = t.numel() * t.element_size()
    storage = t.untyped_storage()
    if nbytes == 0 or storage.nbytes() == nbytes:
        return t
    start = t.storage_offset() * t.element_size()
    return torch.empty(0, dtype=t.dtype).set_(storage[start : start + nbytes], 0, t.shape, t.stride())  # the slice keeps the segment alive


def _cache(owner) -> dict:
    cache = getattr(owner, "_rl_host_copies", None)
    if cache is None:
        cache = {}
        owner._rl_host_copies = cache
    return cache


def move_params(model: torch.nn.Module, device: torch.device) -> None:
    """Copy every parameter and buffer of ``model`` to ``device`` (``cpu``: its host buffers) in place of the old storage."""
    cache = _cache(model)
    with torch.no_grad():
        for i, p in enumerate(model.parameters()):
            p.data = _to(p.data, device, cache, ("p", i))
            if p.grad is not None:
                p.grad = _to(p.grad, device, cache, ("g", i))
        for j, module in enumerate(model.modules()):
            for name, buf in list(module._buffers.items()):
                if buf is not None:
                    module._buffers[name] = _to(buf, device, cache, ("b", j, name))


def move_grads(model: torch.nn.Module, device: torch.device) -> int:
    """Copy the gradients that exist to ``device`` (``cpu``: host buffers); returns how many moved."""
    cache = _cache(model)
    n = 0
    with torch.no_grad():
        for i, p in enumerate(model.parameters()):
            if p.grad is not None:
                p.grad = _to(p.grad, device, cache, ("g", i))
                n += 1
    return n


def move_optimizer_state(optimizer: torch.optim.Optimizer, device: torch.device, params: list | None = None) -> None:
    """Copy the state tensors of ``params`` (default: all) to ``device`` (the host: reused host buffers)."""
    cache = _cache(optimizer)
    for p in params if params is not None else list(optimizer.state.keys()):
        state = optimizer.state.get(p)
        if not state:
            continue
        for key, value in state.items():
            if isinstance(value, torch.Tensor):
                state[key] = _to(value, device, cache, (id(p), key))


def _chunks(optimizer: torch.optim.Optimizer, chunk_bytes: int) -> Iterator[list[tuple[int, list]]]:
    """Per chunk: ``[(group index, its parameters in the chunk)]``, about ``chunk_bytes`` of AdamW state each."""
    chunk: list[tuple[int, list]] = []
    size = 0
    for g, group in enumerate(optimizer.param_groups):
        mine: list = []
        for p in group["params"]:
            if p.grad is None:
                continue
            mine.append(p)
            size += 2 * p.numel() * 4  # exp_avg + exp_avg_sq, float32
            if size >= chunk_bytes:
                chunk.append((g, mine))
                yield chunk
                chunk, mine, size = [], [], 0
        if mine:
            chunk.append((g, mine))
    if chunk:
        yield chunk


def streamed_step(optimizer: torch.optim.Optimizer, device: torch.device, chunk_bytes: int = CHUNK_BYTES) -> int:
    """``optimizer.step()`` with its state kept in host memory, one chunk of parameters at a time; returns the number
    of chunks. Each group's parameter list is narrowed to the chunk for the step and restored after."""
    groups = [group["params"] for group in optimizer.param_groups]
    n = 0
    try:
        for chunk in _chunks(optimizer, chunk_bytes):
            params = [p for _, ps in chunk for p in ps]
            move_optimizer_state(optimizer, device, params)
            for g, group in enumerate(optimizer.param_groups):
                group["params"] = next((ps for gi, ps in chunk if gi == g), [])
            optimizer.step()
            move_optimizer_state(optimizer, torch.device("cpu"), params)
            n += 1
    finally:
        for group, params in zip(optimizer.param_groups, groups):
            group["params"] = params
    return n


def offloaded_params(optimizer: torch.optim.Optimizer, fraction: float = 1.0) -> set[int]:
    """ids of the parameters whose AdamW step runs on the host under megatron-core's ``optimizer_offload_fraction``:
    in the optimizer's order, parameters are taken while the numel taken so far is below ``fraction`` of the total
    (megatron-core's ``HybridDeviceOptimizer._get_sub_optimizer_param_groups``)."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    threshold, taken, out = sum(p.numel() for p in params) * float(fraction), 0, set()
    for p in params:
        if taken < threshold:
            out.add(id(p))
            taken += p.numel()
    return out


def host_step(optimizer: torch.optim.Optimizer, fraction: float = 1.0) -> int:
    """``optimizer.step()`` on the host (megatron-core's ``optimizer_cpu_offload``): each stepped parameter and its
    gradient are copied into host buffers, AdamW (its state in host memory) steps there, and the parameter is copied
    back to its device. With ``fraction`` < 1 only :func:`offloaded_params` step on the host; the others (and their
    state) stay on their device, in the same ``step()``. Returns the number of parameters stepped on the host."""
    cache = _cache(optimizer)
    host = torch.device("cpu")
    moved = []
    chosen = offloaded_params(optimizer, fraction) if fraction < 1 else None
    with torch.no_grad():
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.grad is None or (chosen is not None and id(p) not in chosen):
                    continue
                moved.append((p, p.data.device))
                p.data = _to(p.data, host, cache, ("hp", id(p)))
                p.grad = _to(p.grad, host, cache, ("hg", id(p)))
        move_optimizer_state(optimizer, host, [p for p, _ in moved])
    optimizer.step()
    with torch.no_grad():
        for p, device in moved:
            if device.type != "cpu":
                p.data = p.data.to(device, copy=True, non_blocking=True)
    return len(moved)
