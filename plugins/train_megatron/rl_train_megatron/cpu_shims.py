"""CPU stand-ins for megatron-core's CUDA-only calls (megatron-core 0.16.1), used only without a GPU.

megatron-core assumes a GPU in a few places the Megatron engine reaches:

- ``tensor_parallel.random``: attention runs its dropout inside
  ``get_cuda_rng_tracker().fork()``, which saves and restores
  ``torch.cuda`` RNG states. On CPU the tracker is replaced by one whose
  ``fork()`` leaves the (CPU) generator alone: the engine builds its models
  with dropout 0, so no random numbers are drawn there.
- ``parallel_state``'s global memory buffer (the attention-score matmul
  writes into it) allocates on ``torch.cuda.current_device()``: replaced by
  one that allocates on the CPU.
- ``RotaryEmbedding`` moves ``inv_freq`` to ``torch.cuda.current_device()``
  and ``FusedScaleMaskSoftmax`` builds its causal mask with
  ``device="cuda"`` when none is given: the engine never calls either
  (it computes rotary angles from the batch's position ids and always passes
  a padding-aware causal mask, see :mod:`rl_train_megatron.model`), so
  nothing is patched for them.
- activation recomputation (``train.options.transformer_config.recompute_*``) saves and restores the CUDA RNG
  state around each recomputed layer (``tensor_parallel.random._get_cuda_rng_state`` / ``_set_cuda_rng_state``):
  replaced by ones that keep no CUDA state (there is none; dropout is 0).
- Megatron's optimizers and ``clip_grads`` assert CUDA tensors: the engine
  uses ``torch.optim.AdamW`` and its own gradient-norm code instead.
- MoE layers and sequence parallelism (:func:`install_moe`): the router's ``gating`` moves a CPU weight to
  ``torch.cuda.current_device()`` before its matmul, and the router allocates its expert-bias / global-aux-loss
  buffers there, and ``tensor_parallel.mappings``' gathers (which the token dispatcher calls over the expert-parallel
  group) allocate their outputs there, as do the linears' sequence-parallel backward (``tensor_parallel.layers``): the gating
  is replaced by the same matmul without the move, and the router, mappings and layers modules' ``torch.cuda.current_device()``
  answers ``"cpu"``. Without TransformerEngine, megatron-core 0.16.1's router
  matmul reads an undefined ``te_general_gemm``: set to None (its plain-torch branch; :func:`install_router_gemm_fallback`,
  which the engine also calls on GPUs). The engine builds MoE layers with the ``allgather`` token
  dispatcher and sequential experts (one GEMM per expert), which run on gloo; the ``alltoall`` / ``flex``
  dispatchers and grouped GEMMs need CUDA (the engine says so at start, :func:`rl_train_megatron.model.moe_cpu_problem`).

:func:`install` is called after ``parallel_state.initialize_model_parallel``
with the engine's device; it checks that the names it replaces
exist (feature detection, not a version check) and says which is missing.
:func:`install` and :func:`install_moe` install nothing unless that device is the CPU (a GPU run never runs with
a shim, whatever the caller; :func:`installed` says which are in place, for the tests).
:func:`install_router_gemm_fallback` is no CPU shim: megatron-core 0.16.1 needs it without TransformerEngine on GPUs too.
"""

from __future__ import annotations

import contextlib

import torch


class CPURNGTracker:
    """``CudaRNGStatesTracker``'s interface with no CUDA state: ``fork()`` is a plain context."""

    def __init__(self) -> None:
        self.states_: dict[str, torch.Tensor] = {}

    def is_initialized(self) -> bool:
        return True

    def reset(self) -> None:
        self.states_ = {}

    def get_states(self) -> dict[str, torch.Tensor]:
        return dict(self.states_)

    def set_states(self, states) -> None:
        self.states_ = dict(states)

    def add(self, name: str, seed: int) -> None:
        self.states_[name] = torch.tensor([seed])

    @contextlib.contextmanager
    def fork(self, name: str = "model-parallel-rng"):
        yield


class CPUMemoryBuffer:
    """``parallel_state``'s ``GlobalMemoryBuffer`` allocating on the CPU."""

    def __init__(self) -> None:
        self.buffer: dict = {}

    def get_tensor(self, tensor_shape, dtype, name, mem_alloc_context=None):
        need = 1
        for s in tensor_shape:
            need *= int(s)
        buf = self.buffer.get((name, dtype))
        if buf is None or buf.numel() < need:
            buf = self.buffer[(name, dtype)] = torch.empty(need, dtype=dtype)
        return buf[:need].view(*tensor_shape)


def _no_cuda_rng_state(*args, **kwargs) -> torch.Tensor:
    return torch.empty(0, dtype=torch.uint8)


def _set_no_cuda_rng_state(*args, **kwargs) -> None:
    return None


class _CPUDevice:
    """``torch.cuda`` for the MoE router module on a machine without CUDA: the current device is the CPU."""

    @staticmethod
    def current_device() -> str:
        return "cpu"

    def __getattr__(self, name):
        return getattr(torch.cuda, name)


class _TorchOnCPU:
    """The ``torch`` module as megatron-core's router module sees it on the CPU (only ``torch.cuda`` differs)."""

    cuda = _CPUDevice()

    def __getattr__(self, name):
        return getattr(torch, name)


def _cpu_gating(self, input: torch.Tensor) -> torch.Tensor:
    """``Router.gating`` without the move of the weight to CUDA: the router logits in the configured router dtype."""
    from megatron.core.transformer.moe.router import router_gating_linear

    dtype = {"fp32": torch.float32, "fp64": torch.float64}.get(self.config.moe_router_dtype, input.dtype)
    return router_gating_linear(input, self.weight, self.bias, dtype)


def install_router_gemm_fallback() -> None:
    """megatron-core 0.16.1's router matmul (``moe_utils.RouterGatingLinearFunction``) reads ``te_general_gemm``, a name it
    defines only when TransformerEngine imports: without TE every MoE forward fails with a NameError, on the CPU and on
    GPUs alike. Set to None, the function takes its plain-torch branch (idempotent; a real TE gemm is kept)."""
    from megatron.core.transformer.moe import moe_utils

    if not hasattr(moe_utils, "te_general_gemm"):
        moe_utils.te_general_gemm = None


def _on_cpu(device) -> bool:
    return torch.device(device).type == "cpu"


def installed() -> list[str]:
    """The CPU shims now in place in megatron-core (none on a GPU run)."""
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel import layers, mappings
    from megatron.core.tensor_parallel import random as mp_random
    from megatron.core.transformer.moe import router

    out = []
    if isinstance(mp_random._CUDA_RNG_STATE_TRACKER, CPURNGTracker):
        out.append("rng_tracker")
    if isinstance(parallel_state._GLOBAL_MEMORY_BUFFER, CPUMemoryBuffer):
        out.append("memory_buffer")
    if mp_random._get_cuda_rng_state is _no_cuda_rng_state or mp_random._set_cuda_rng_state is _set_no_cuda_rng_state:
        out.append("cuda_rng_state")
    if router.Router.gating is _cpu_gating:
        out.append("router_gating")
    out += [f"{m.__name__}.torch" for m in (router, mappings, layers) if isinstance(m.torch, _TorchOnCPU)]
    from megatron.core.pipeline_parallel import p2p_communication, schedules

    out += [f"{m.__name__}.torch" for m in (schedules, p2p_communication) if isinstance(m.torch, _TorchOnCPU)]
    return out


def install_moe(device) -> None:
    """The MoE router's CPU stand-ins (idempotent; called by the engine when the model has experts or sequence
    parallelism): nothing unless ``device`` is the CPU."""
    if not _on_cpu(device):
        return
    from megatron.core.transformer.moe import router

    for attr in ("Router", "router_gating_linear", "torch"):
        if not hasattr(router, attr):
            raise RuntimeError(
                f"megatron-core has no megatron.core.transformer.moe.router.{attr}: the MoE CPU shims of rl-train-megatron were written "
                "for megatron-core 0.16.1; install that version (pip install megatron-core==0.16.1) or run on a GPU"
            )
    install_router_gemm_fallback()
    from megatron.core.tensor_parallel import layers, mappings

    router.Router.gating = _cpu_gating
    # mappings: the dispatcher's (and sequence parallelism's) all-gathers allocate their outputs on the current device;
    # layers: under sequence parallelism the linears' backward allocates its reduce-scatter output there
    for module in (router, mappings, layers):
        if not isinstance(module.torch, _TorchOnCPU):
            module.torch = _TorchOnCPU()


def install(device) -> None:
    """Replace the CUDA-only RNG tracker and memory buffer of megatron-core with CPU ones (idempotent): nothing unless
    ``device`` is the CPU."""
    if not _on_cpu(device):
        return
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel import random as mp_random

    names = ((mp_random, "_CUDA_RNG_STATE_TRACKER"), (mp_random, "_CUDA_RNG_STATE_TRACKER_INITIALIZED"), (parallel_state, "_GLOBAL_MEMORY_BUFFER"),
             (mp_random, "_get_cuda_rng_state"), (mp_random, "_set_cuda_rng_state"))
    for module, attr in names:
        if not hasattr(module, attr):
            raise RuntimeError(
                f"megatron-core has no {module.__name__}.{attr}: the CPU shims of rl-train-megatron were written for "
                "megatron-core 0.16.1; install that version (pip install megatron-core==0.16.1) or run on a GPU"
            )
    if not isinstance(mp_random._CUDA_RNG_STATE_TRACKER, CPURNGTracker):
        mp_random._CUDA_RNG_STATE_TRACKER = CPURNGTracker()
        mp_random._CUDA_RNG_STATE_TRACKER_INITIALIZED = True
    if not isinstance(parallel_state._GLOBAL_MEMORY_BUFFER, CPUMemoryBuffer):
        parallel_state._GLOBAL_MEMORY_BUFFER = CPUMemoryBuffer()
    mp_random._get_cuda_rng_state = _no_cuda_rng_state
    mp_random._set_cuda_rng_state = _set_no_cuda_rng_state


class _ScheduleCUDA(_CPUDevice):
    """``torch.cuda`` for megatron-core's pipeline schedule and point-to-point modules on the CPU: the current device is
    the CPU and ``synchronize`` (its guard around batched sends) has nothing to wait for (gloo's requests were waited)."""

    @staticmethod
    def synchronize(*args, **kwargs) -> None:
        return None


class _ScheduleTorch(_TorchOnCPU):
    """``torch`` as megatron-core's ``pipeline_parallel.schedules`` / ``p2p_communication`` see it on the CPU: its token
    counter is allocated with ``device="cuda"``, which becomes the CPU."""

    cuda = _ScheduleCUDA()

    @staticmethod
    def zeros(*args, device=None, **kwargs):
        return torch.zeros(*args, device="cpu" if device == "cuda" else device, **kwargs)


def install_schedule(device) -> None:
    """megatron-core's pipeline schedule (``get_forward_backward_func``) on the CPU (idempotent): nothing unless
    ``device`` is the CPU (:mod:`rl_train_megatron.core_pipeline`)."""
    if not _on_cpu(device):
        return
    from megatron.core.pipeline_parallel import p2p_communication, schedules

    for module in (schedules, p2p_communication):
        if not hasattr(module, "torch"):
            raise RuntimeError(f"megatron-core's {module.__name__} does not import torch as the CPU shims of rl-train-megatron expect "
                               "(written for megatron-core 0.16.1); install that version or run on a GPU")
        if not isinstance(module.torch, _ScheduleTorch):
            module.torch = _ScheduleTorch()
