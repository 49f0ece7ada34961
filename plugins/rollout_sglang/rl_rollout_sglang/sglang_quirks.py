"""Workarounds for SGLang 0.5.23's quirks, in one place (features detected, versions never parsed).

What SGLang needs that its documentation does not say, and what this adapter
does about it:

CPU engine selection
    The CPU model runner is chosen by the environment variable
    ``SGLANG_USE_CPU_ENGINE=1`` in addition to ``device="cpu"``; with TP > 1 on
    CPU every TP worker needs its own cores, given as
    ``SGLANG_CPU_OMP_THREADS_BIND="0|1"`` (one ``|``-separated core list per
    rank). :func:`configure_cpu_environment` sets both where the user has not.

Seeded sampling on CPU
    A request's ``sampling_seed`` is honoured only with
    ``enable_deterministic_inference``, which SGLang allows only on GPU
    attention backends: on CPU every seed is silently ignored and sampling
    follows the scheduler process's global RNG. SGLang's sampler already
    implements seeded sampling for its ``pytorch`` backend (a hash of seed and
    position drives Gumbel-max sampling, :func:`sglang.srt.layers.sampler.multinomial_with_seed`);
    only ``SamplingBatchInfo.from_schedule_batch`` leaves the seeds out. This
    distribution registers an SGLang *general plugin* (entry point group
    ``sglang.srt.plugins``, loaded by SGLang in every one of its processes)
    that, when ``RL_SGLANG_SEEDED_SAMPLING=1`` (set by the engine adapter on
    CPU only), adds the requests' seeds to the batch after SGLang built it
    (:func:`sglang_plugin`). Seeded sampling hashes (seed, position, token) with
    ``torch.ops.sgl_kernel.murmur_hash32_cpu`` on CPU, a kernel of the CUDA-only
    ``sglang-kernel`` wheel; where that op is missing the plugin swaps in
    :func:`hash32`, a torch-native 32-bit hash of the same inputs. The plugin
    changes nothing when the variable is unset, nothing when SGLang already
    filled the seeds, and keeps the kernel where it exists.

Weight-update sessions
    0.5.23 requires ``update_weights_from_tensor`` calls to be bracketed by
    ``begin_weight_update()`` / ``end_weight_update()`` (the end call also
    finalises quantized weights). :func:`weight_update_session` brackets when
    the engine has those methods and does not when it lacks them.

Memory release and its host copy of the weights (GPU, SGLang 0.5.17 with torch_memory_saver 0.0.10)
    ``release_memory_occupation(tags)`` pauses torch_memory_saver's regions
    (``kv_cache``, ``weights``, ``cuda_graph``; no tags: all three). With
    ``enable_weights_cpu_backup`` the ``weights`` region is copied to host memory
    first, into a pinned buffer that torch_memory_saver allocates
    (``cudaMallocHost``) at every release and frees (``cudaFreeHost``) at every
    resume (``csrc/cpu_backup.h``, ``csrc/core.cpp`` pause / resume). The
    release measured 1.15-1.46 s a step for a 1.5B model (3 GB of bf16 weights)
    on an H200, against 0.15 s for vLLM's sleep level 1 (whose pinned buffers
    stay in torch's host cache). The same pattern alone on an H200 (170
    tensors, 2.9 GiB of bf16, ``cudaMallocHost`` + ``cudaMemcpy`` each, then
    ``cudaMemcpy`` back + ``cudaFreeHost``): 1.14-1.83 s to copy out and
    0.35-0.51 s back each cycle; into buffers kept from the first cycle,
    0.058 s each way.
    torch_memory_saver keeps the buffer from one release to the next when
    ``TMS_RETAIN_CPU_BACKUP=1`` is in the environment of SGLang's scheduler
    (read when it starts): :func:`retain_weights_backup` sets it where unset,
    before the engine starts. Host memory: one pinned copy of the weights for
    the engine's life, as vLLM's. A server started by hand needs the variable
    in its own environment.

Multiprocessing start method
    The engine starts its scheduler and detokenizer with the ``spawn`` start
    method, which re-imports ``__main__``: scripts must guard their entry
    point with ``if __name__ == "__main__":`` (``rlcore train`` does).
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
from typing import Any, Iterator

log = logging.getLogger(__name__)

#: Set to ``1`` in the environment SGLang's processes inherit to add request seeds on CPU.
SEEDED_SAMPLING_ENV = "RL_SGLANG_SEEDED_SAMPLING"
#: Set to ``1`` in the environment SGLang's processes inherit to make pinning host memory a no-op (CPU only).
UNPINNED_ENV = "RL_SGLANG_CPU_UNPINNED"
#: torch_memory_saver's switch (0.0.10) that keeps a region's pinned host copy across resumes instead of freeing it.
RETAIN_BACKUP_ENV = "TMS_RETAIN_CPU_BACKUP"
_SEED_HOOK_TARGET = "sglang.srt.sampling.sampling_batch_info.SamplingBatchInfo.from_schedule_batch"
_HASH_HOOK_TARGET = "sglang.srt.layers.sampler.murmur_hash32"
_M32 = 0xFFFFFFFF


def configure_cpu_environment(tp: int, first_core: int = 0) -> dict[str, str]:
    """Environment the CPU engine reads (only keys the user has not set); returns what was set."""
    wanted = {"SGLANG_USE_CPU_ENGINE": "1", SEEDED_SAMPLING_ENV: "1", UNPINNED_ENV: "1"}
    if tp > 1:
        cores = os.cpu_count() or tp
        per_rank = max(1, cores // tp)
        groups = []
        for r in range(tp):
            start = first_core + r * per_rank
            groups.append(str(start) if per_rank == 1 else f"{start}-{start + per_rank - 1}")
        wanted["SGLANG_CPU_OMP_THREADS_BIND"] = "|".join(groups)
    done = {}
    for key, value in wanted.items():
        if key not in os.environ:
            os.environ[key] = value
            done[key] = value
    return done


@contextlib.contextmanager
def weight_update_session(client) -> Iterator[None]:
    """``begin_weight_update()`` ... ``end_weight_update()`` around a sync, where the engine has them."""
    bracket = callable(getattr(client, "begin_weight_update", None)) and callable(getattr(client, "end_weight_update", None))
    if bracket:
        client.begin_weight_update()
    try:
        yield
    finally:
        if bracket:
            client.end_weight_update()


def retain_weights_backup() -> bool:
    """Keep torch_memory_saver's pinned host copy of the weights between releases (the module docstring): sets
    ``TMS_RETAIN_CPU_BACKUP=1`` for the SGLang processes started after it, unless the user set it; True when set here."""
    if RETAIN_BACKUP_ENV in os.environ:
        return False
    os.environ[RETAIN_BACKUP_ENV] = "1"
    return True


def check_result(result: Any, what: str) -> None:
    """Raise with SGLang's message when a control call reports failure.

    Control calls answer ``(success, message)``, an object with ``success`` /
    ``message``, a dict with those keys, or ``None`` (no report).
    """
    if result is None:
        return
    if isinstance(result, tuple) and len(result) >= 1:
        ok, message = result[0], (result[1] if len(result) > 1 else "")
    elif isinstance(result, dict):
        ok, message = result.get("success", True), result.get("message", "")
    else:
        ok, message = getattr(result, "success", True), getattr(result, "message", "")
    if not ok:
        raise RuntimeError(f"SGLang {what} failed: {message}")


# ----------------------------------------------------------- the SGLang plugin
def _add_request_seeds(result, *args, **kwargs):
    """AFTER hook of ``SamplingBatchInfo.from_schedule_batch``: the requests' seeds, where SGLang left them out."""
    if result is None or getattr(result, "sampling_seed", "absent") is not None:
        return result
    batch = next((a for a in (*args, *kwargs.values()) if hasattr(a, "reqs")), None)
    if batch is None:
        return result
    seeds = [getattr(r.sampling_params, "sampling_seed", None) for r in batch.reqs]
    if all(s is None for s in seeds):
        return result
    import torch

    # A request without a seed next to seeded ones (never sent by rl-rollout-sglang) gets a random one.
    values = [s if s is not None else random.getrandbits(62) for s in seeds]
    result.sampling_seed = torch.tensor(values, dtype=torch.int64, device=result.temperatures.device)
    return result


def _mul32(a, c: int):
    """``a * c mod 2**32`` for an int64 tensor ``a`` in [0, 2**32) (split so nothing overflows int64)."""
    return (a * (c & 0xFFFF) + (((a * (c >> 16)) & 0xFFFF) << 16)) & _M32


def _fmix32(h):
    """MurmurHash3's 32-bit finaliser on an int64 tensor in [0, 2**32)."""
    h = h ^ (h >> 16)
    h = _mul32(h, 0x85EBCA6B)
    h = h ^ (h >> 13)
    h = _mul32(h, 0xC2B2AE35)
    return h ^ (h >> 16)


def hash32(seed, positions, col_indices):
    """Torch-native stand-in for SGLang's ``murmur_hash32``: ``[n, m]`` values in [0, 2**32).

    Row ``i``, column ``j`` hashes (``seed[i]``, ``positions[i]``, ``col_indices[j]``):
    equal inputs give equal values, so a seeded request samples the same tokens
    every time; the values differ from SGLang's CUDA kernel's (sampling on CPU is
    reproducible on CPU, not across devices).
    """
    import torch

    s = seed.to(torch.int64)
    lo, hi = s & _M32, (s >> 32) & _M32
    row = _fmix32(lo ^ _fmix32(hi ^ _mul32(positions.to(torch.int64) & _M32, 0x9E3779B1)))
    col = _fmix32(_mul32(col_indices.to(torch.int64) & _M32, 0x27D4EB2F) ^ 0x165667B1)
    return _fmix32(row[:, None] ^ col[None, :])


def _cpu_hash_kernel_missing() -> bool:
    import torch

    try:
        import sgl_kernel  # noqa: F401
    except Exception:  # noqa: BLE001 - absent or broken: no kernel either way
        return True
    return not hasattr(torch.ops.sgl_kernel, "murmur_hash32_cpu")


#: Factories SGLang's LoRA code calls with ``pin_memory=True`` (sglang/srt/lora, 0.5.23).
_PINNING_FACTORIES = ("tensor", "empty", "zeros", "ones", "full", "arange", "as_tensor", "empty_like", "zeros_like", "ones_like")


def unpinned_on_cpu_only_torch() -> bool:
    """On a torch without any accelerator, make pinning host memory a no-op; whether it did.

    Pinned (page-locked) host memory only speeds up copies to an accelerator; a CPU-only torch has no allocator for
    it and raises for ``pin_memory=True`` / ``Tensor.pin_memory()``, which SGLang 0.5.23's LoRA layers and memory pool
    call unconditionally (26 calls in sglang/srt/lora): the CPU engine dies at start-up with ``enable_lora``. Here
    ``Tensor.pin_memory()`` returns the tensor itself and the factories above drop ``pin_memory=True``: the same
    tensors, unpinned, which is all a CPU-only process can have. Nothing changes where an accelerator exists."""
    import functools

    import torch

    if torch.cuda.is_available() or getattr(torch, "_rl_unpinned", False):
        return False
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and accelerator.is_available():
        return False

    def unpinned(fn):
        @functools.wraps(fn)
        def call(*args, **kwargs):
            kwargs.pop("pin_memory", None)
            return fn(*args, **kwargs)

        return call

    for name in _PINNING_FACTORIES:
        setattr(torch, name, unpinned(getattr(torch, name)))
    torch.Tensor.pin_memory = lambda self, *args, **kwargs: self
    torch._rl_unpinned = True
    return True


def sglang_plugin() -> None:
    """SGLang general plugin (entry point ``sglang.srt.plugins``): seeded sampling on CPU.

    Inert unless ``RL_SGLANG_SEEDED_SAMPLING=1``; see the module docstring. With ``RL_SGLANG_SAMPLE_WEIGHTS=1``
    also the weight-sync check's read-back (:mod:`rl_rollout_sglang.held`).
    """
    from rl_rollout_sglang.held import HOOK_TARGET, SAMPLE_WEIGHTS_ENV, sample_hook

    if os.environ.get(SAMPLE_WEIGHTS_ENV) == "1":
        try:
            from sglang.srt.plugins.hook_registry import HookRegistry, HookType

            HookRegistry.register(HOOK_TARGET, sample_hook, HookType.AROUND)
            from rl_rollout_sglang.lora import MANAGER_HOOK_TARGET, remember_manager

            HookRegistry.register(MANAGER_HOOK_TARGET, remember_manager, HookType.AFTER)  # the LoRA adapter's read-back
        except ImportError as exc:  # another SGLang layout: syncs are not verified
            log.warning("rl-rollout-sglang: the weight-sync check cannot read SGLang's weights (%s)", exc)
    if os.environ.get(UNPINNED_ENV) == "1":  # the CPU engine (set by configure_cpu_environment): LoRA layers pin memory
        unpinned_on_cpu_only_torch()
    if os.environ.get(SEEDED_SAMPLING_ENV) != "1":
        return
    try:
        from sglang.srt.plugins.hook_registry import HookRegistry, HookType
        from sglang.srt.sampling.sampling_batch_info import SamplingBatchInfo
    except ImportError as exc:  # another SGLang layout: leave it alone, seeds stay ignored
        log.warning("rl-rollout-sglang: seeded sampling on CPU is unavailable (%s)", exc)
        return
    if "sampling_seed" not in getattr(SamplingBatchInfo, "__dataclass_fields__", {}):
        log.warning("rl-rollout-sglang: this SGLang's SamplingBatchInfo has no sampling_seed; seeds are ignored on CPU")
        return
    HookRegistry.register(_SEED_HOOK_TARGET, _add_request_seeds, HookType.AFTER)
    if _cpu_hash_kernel_missing():
        HookRegistry.register(_HASH_HOOK_TARGET, hash32, HookType.REPLACE)
