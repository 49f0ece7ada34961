"""Fully sharded data parallelism for the Megatron engine (``train.fully_shard``; verl's ``megatron.use_megatron_fsdp``).

The megatron-core model's parameters, gradients and AdamW state are sharded over the data-parallel ranks that hold the
same tensor-parallel shard (ZeRO-3): torch FSDP2's ``fully_shard`` over a one-dimensional ``DeviceMesh`` made from that
process group (:func:`rl_train_megatron.parallel.grad_group`), applied to megatron-core's own modules:

- each ``TransformerLayer`` of the decoder is one FSDP unit: its parameters are all-gathered for its forward (and again
  for its backward) and freed after; its gradients are reduce-scattered (summed) at the end of its backward;
- the rest (embedding, final norm, LM head or value head) is the root unit, :class:`Stage`: the engine's whole forward
  (embedding, decoder, heads) runs as ``Stage.forward`` so that FSDP's hooks see it (the engine calls the embedding,
  decoder and head itself, not ``GPTModel.forward``).

Each TP rank shards its own TP slice of each tensor (dim 0, padded as FSDP2 pads), so the TP collectives inside the
layers see whole TP slices as without sharding. Gradients are summed over the data-parallel ranks (FSDP2's divide
factor 1), as the engine's all-reduce does without sharding; the norm sums each rank's shard's squares over the
data-parallel group, then over TP (what :mod:`rl_train_megatron.grads` counts). AdamW steps each rank's shard: the
update is element-wise, so the numbers are those of plain data parallelism.

This is not NVIDIA's ``megatron_fsdp`` package of megatron-core (``use_megatron_fsdp``'s own implementation: CUDA
streams, its own buffers and overlap; it cannot run on the CPU): the same sharding and numbers on torch's FSDP2 kernels.

Checkpoints hold each rank's local shards (parameters and AdamW state); the weight sync and the HF export all-gather
one tensor at a time over the data-parallel group before the TP merge (:func:`gathered`).
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.distributed as dist


class Stage(torch.nn.Module):
    """The root FSDP unit: the model chunk, and a forward that runs the engine's function with its own parameters
    (embedding, final norm, heads) gathered (the decoder layers gather theirs in their own forward)."""

    def __init__(self, chunk: torch.nn.Module) -> None:
        super().__init__()
        self.chunk = chunk
        self.running = False  # inside heads(): the engine's forward runs its own body

    def forward(self, fn: Callable[..., Any], *args: Any) -> Any:
        return fn(*args)

    def heads(self, forward: Callable[..., Any], x: dict[str, torch.Tensor], **kwargs: Any):
        """``forward(x, **kwargs)`` (the engine's, which returns :class:`rl_core.train_engine.backend.Heads` or None) run
        inside this unit: its tensors go out as a tuple, so that FSDP's backward hooks see them."""
        from rl_core.train_engine.backend import Heads

        def run(x):
            h = forward(x, **kwargs)
            return None if h is None else (h.log_probs, h.entropy, h.values)

        self.running = True
        try:
            out = self(run, x)
        finally:
            self.running = False
        return None if out is None else Heads(log_probs=out[0], entropy=out[1], values=out[2])


def shard(chunk: torch.nn.Module, group, device: torch.device) -> Stage:
    """``fully_shard`` each decoder layer and the rest of ``chunk`` over ``group``; returns the root unit.

    megatron-core's per-parameter flags (``sequence_parallel``) are carried over to the sharded parameters (FSDP2
    registers new ones)."""
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard

    flags = {n: {k: v for k, v in vars(p).items() if k == "sequence_parallel"} for n, p in chunk.named_parameters()}
    mesh = DeviceMesh.from_group(group, device_type=device.type)
    units = []
    for layer in chunk.decoder.layers:
        units.append(fully_shard(layer, mesh=mesh))
    root = Stage(chunk)
    units.append(fully_shard(root, mesh=mesh, reshard_after_forward=True))  # (FSDP2 keeps a root gathered by default)
    for unit in units:
        unit.set_gradient_divide_factor(1.0)  # summed over the data-parallel ranks, as the engine's all-reduce does:
        unit.set_force_sum_reduction_for_comms(True)  # a plain SUM reduce-scatter (gloo has no pre-multiplied sum)
    for n, p in chunk.named_parameters():
        for k, v in flags.get(n, {}).items():
            setattr(p, k, v)
    return root


def local(t: torch.Tensor) -> torch.Tensor:
    """This rank's shard of a sharded tensor (a DTensor), else the tensor."""
    from torch.distributed.tensor import DTensor

    return t.to_local() if isinstance(t, DTensor) else t


class Gathered:
    """A sharded parameter as :func:`rl_train_megatron.weights.gather_hf_weights` reads it: the whole (TP-local) shape and
    dtype; ``detach()`` all-gathers it over the data-parallel group (every rank must ask for the same tensors in order)."""

    def __init__(self, param: torch.Tensor) -> None:
        self.param = param
        self.shape, self.dtype = param.shape, param.dtype

    def detach(self) -> torch.Tensor:
        return self.param.detach().full_tensor()


def gathered(params: list[tuple[str, torch.Tensor]]) -> list[tuple[str, Any]]:
    return [(n, Gathered(p)) for n, p in params]


def reduce_local_grads(params: list[torch.nn.Parameter], group) -> None:
    """Sum the gradients' local shards over ``group`` (TP: weights replicated over TP whose gradient covers this rank's
    heads or tokens only; every TP rank shards them alike), one flat buffer."""
    from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

    grads = [local(p.grad) for p in params if p.grad is not None]
    if not grads or group_size(group) == 1:
        return
    flat = _flatten_dense_tensors(grads)
    dist.all_reduce(flat, group=group)
    for g, new in zip(grads, _unflatten_dense_tensors(flat, grads)):
        g.copy_(new)


def reduce_and_clip(backend, max_norm: float | None) -> float:
    """The engine's ``reduce_and_clip`` when sharded: FSDP has summed the gradients over the data-parallel ranks in the
    backward; weights replicated over TP whose gradient covers this rank's heads (Qwen3's q/k norms) or tokens
    (sequence parallelism) are summed over TP; then the whole-model norm and the clipping."""
    from rl_train_megatron import convert, grads, parallel
    from rl_train_megatron import sequence_parallel as seq_par

    model, t = backend.model, backend.topo
    if backend.shape.qk_norm and t.tp > 1:
        reduce_local_grads([p for n, p in model.named_parameters() if convert.is_qk_norm(n) and p.grad is not None], parallel.tp_group())
    if backend.sp:
        reduce_local_grads(seq_par.sequence_parallel_params(model, convert.is_qk_norm), parallel.tp_group())
    counted = [p for n, p in model.named_parameters() if convert.split_dim(n) is not None or t.tp_rank == 0]
    return grads.clip_grad_norm(list(model.parameters()), counted, max_norm, backend.device, dp_group=parallel.grad_group())


def local_bytes(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None) -> int:
    """This rank's bytes of parameters and AdamW state (shards only)."""
    n = sum(local(p).numel() * p.element_size() for p in model.parameters())
    if optimizer is not None:
        for state in optimizer.state.values():
            n += sum(local(v).numel() * v.element_size() for v in state.values() if isinstance(v, torch.Tensor) and v.dim() > 0)
    return n


def local_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None) -> dict[str, Any]:
    """This rank's shards as plain tensors: ``model`` by name, ``optim`` as ``optimizer.state_dict()`` with local shards."""
    from rl_core.checkpoints import copy_state

    out: dict[str, Any] = {"model": {n: local(p.detach()).clone() for n, p in model.named_parameters()}}
    if optimizer is not None:
        sd = optimizer.state_dict()
        sd["state"] = {k: {n: local(v).clone() if isinstance(v, torch.Tensor) else v for n, v in s.items()} for k, s in sd["state"].items()}
        out["optim"] = copy_state(sd)
    return out


def load_local_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None, state: dict[str, Any]) -> None:
    """Put :func:`local_state`'s shards back (the same layout: checked by the caller's manifest and shapes)."""
    from torch.distributed.tensor import DTensor

    with torch.no_grad():
        for name, p in model.named_parameters():
            local(p).copy_(state["model"][name])
    if optimizer is None:
        return
    params = [p for g in optimizer.param_groups for p in g["params"]]
    sd = state["optim"]
    for k, s in sd["state"].items():
        p = params[int(k)]
        for n, v in list(s.items()):
            if isinstance(v, torch.Tensor) and v.dim() > 0 and isinstance(p, DTensor):
                s[n] = DTensor.from_local(v.to(local(p).device), p.device_mesh, p.placements, shape=p.shape, stride=p.stride())
    optimizer.load_state_dict(sd)


def group_size(group) -> int:
    return dist.get_world_size(group) if group is not None else 1


def check(backend, config, opts) -> None:
    """Refuse, by key, what the engine does not build with ``train.options.fully_shard`` (options.fully_shard_problems)."""
    from rl_train_megatron.model import ParallelSizeError
    from rl_train_megatron.options import fully_shard_problems

    problems = fully_shard_problems(config, getattr(backend.hf_config, "model_type", "MoE") if backend.shape.moe else None)
    if backend.vpp > 1 and not any(k.endswith("virtual_pipeline_model_parallel_size") for k, _, _ in problems):  # (a pipeline layout's chunks)
        problems.append(("train.options.virtual_pipeline_model_parallel_size", f"gives {backend.vpp} model chunks per stage with "
                         "train.options.fully_shard=true", "one model chunk per stage, or train.options.fully_shard=false"))
    if problems:
        key, what, fix = problems[0]
        raise ParallelSizeError(f"{key}: {what}; {fix}")
