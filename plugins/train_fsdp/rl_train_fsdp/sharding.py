"""FSDP2 plumbing: shard a model, gather its weights, clip gradients, reduce numbers.

With a default process group the model is sharded with
``torch.distributed.fsdp.fully_shard`` over a 1-D device mesh of all ranks:
each transformer block (the classes in the model's ``_no_split_modules``)
is its own FSDP unit, the root module holds the rest (embeddings, final
norm, LM / value head; tied embeddings stay in one unit). Without a process
group the model stays a plain module: same code path, same numbers.
"""

from __future__ import annotations

import math
from typing import Iterator

import torch
import torch.distributed as dist
from rl_core.modeling import decoder_layers


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def rank_and_world() -> tuple[int, int]:
    if is_distributed():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def shard_model(
    model: torch.nn.Module, device: torch.device, *, param_dtype: torch.dtype | None = None, reduce_dtype: torch.dtype = torch.float32,
    shard_size: int = -1,
    offload: bool = False,
    ignored: set[torch.nn.Parameter] | None = None,
) -> torch.nn.Module:
    """``fully_shard`` every decoder layer and the root; ``param_dtype`` turns on mixed precision.

    Mixed precision (``MixedPrecisionPolicy(param_dtype, reduce_dtype)``):
    the sharded parameters and the optimizer stay float32, forward and
    backward run in ``param_dtype``, gradients are reduced in ``reduce_dtype``
    (float32 unless ``actor.fsdp_config.reduce_dtype`` says bfloat16).

    ``shard_size`` (``actor.fsdp_config.fsdp_size``) below the world size: hybrid sharding (HSDP), a 2-D mesh of
    ``world / shard_size`` replicas x ``shard_size`` shards; gradients are reduce-scattered within a copy and
    all-reduced across copies (the same averaged gradients as plain FSDP).

    ``offload``: FSDP2's ``CPUOffloadPolicy``: the sharded parameters, their gradients and so the optimizer's
    state and step live in host memory (pinned on CUDA); a layer's parameters are copied to the device and
    gathered only while it computes.

    ``ignored``: parameters FSDP leaves alone (the experts of expert parallelism, rl_train_fsdp.experts).
    """
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    world = dist.get_world_size()
    if 0 < shard_size < world:
        if world % shard_size:
            raise ValueError(f"actor.fsdp_config.fsdp_size={shard_size} does not divide the {world} ranks")
        mesh = init_device_mesh(device.type, (world // shard_size, shard_size), mesh_dim_names=("replicate", "shard"))
    else:
        mesh = init_device_mesh(device.type, (world,))
    kwargs: dict = {"mesh": mesh}
    low = param_dtype if param_dtype is not None and param_dtype != torch.float32 else None
    if low is not None or reduce_dtype != torch.float32:
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=low, reduce_dtype=reduce_dtype)
    if offload:
        kwargs["offload_policy"] = CPUOffloadPolicy(pin_memory=device.type == "cuda")
    if ignored:
        kwargs["ignored_params"] = ignored
    for layer in decoder_layers(model):
        fully_shard(layer, **kwargs)
    fully_shard(model, **kwargs)
    return model


def full_tensor(t: torch.Tensor) -> torch.Tensor:
    """The whole tensor of a (possibly sharded) parameter; a collective when sharded."""
    from torch.distributed.tensor import DTensor

    if isinstance(t, DTensor):
        if t.device.type != t.device_mesh.device_type:  # host-offloaded shards (CPUOffloadPolicy): gather on the mesh's device
            t = t.to(t.device_mesh.device_type)
        return t.full_tensor()
    return t.detach()


def local_tensor(t: torch.Tensor) -> torch.Tensor:
    from torch.distributed.tensor import DTensor

    return t.to_local() if isinstance(t, DTensor) else t


BUCKET_BYTES = 64 << 20  # local shard bytes gathered by one collective (issue 54)


def iter_full_weights(model: torch.nn.Module, bucket_bytes: int = BUCKET_BYTES) -> Iterator[tuple[str, torch.Tensor]]:
    """HF-named full tensors, identical on every rank, in ``state_dict`` order.

    Names are the model's ``state_dict`` names; a tensor tied under two
    names (``lm_head.weight`` = ``model.embed_tokens.weight``) is yielded
    once under the first, as HF checkpoints store it. Every rank must drain
    the iterator. Sharded tensors are gathered in buckets of about
    ``bucket_bytes`` of local shard (one all-gather per bucket, not one per
    tensor: :func:`_gather_bucket`); unsharded models yield detached views of
    their parameters (no copy).
    """
    seen: set[int] = set()
    bucket: list[tuple[str, torch.Tensor]] = []
    size = 0
    for name, t in model.state_dict(keep_vars=True).items():
        if id(t) in seen:
            continue
        seen.add(id(t))
        if bucket and not (_bucketable(t) and _same_group(bucket[0][1], t)):  # order kept: the bucket goes first
            yield from _gather_bucket(bucket)
            bucket, size = [], 0
        if not _bucketable(t):
            yield name, full_tensor(t)
            continue
        bucket.append((name, t))
        size += t.to_local().numel() * t.element_size()
        if size >= bucket_bytes:
            yield from _gather_bucket(bucket)
            bucket, size = [], 0
    if bucket:
        yield from _gather_bucket(bucket)


def _bucketable(t: torch.Tensor) -> bool:
    """A DTensor sharded on dim 0 over a 1-D mesh, its shard on the mesh's device (FSDP2's layout)."""
    from torch.distributed.tensor import DTensor, Shard

    return (isinstance(t, DTensor) and t.device_mesh.ndim == 1 and len(t.placements) == 1 and t.placements[0] == Shard(0)
            and t.device.type == t.device_mesh.device_type and t.dim() >= 1)


def _same_group(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.device_mesh == b.device_mesh and a.dtype == b.dtype


def _gather_bucket(bucket: list[tuple[str, torch.Tensor]]) -> Iterator[tuple[str, torch.Tensor]]:
    """Full tensors of ``bucket`` (Shard(0) DTensors of one mesh and dtype) from ONE all-gather of their local shards.

    Each rank packs its shards, each padded to ``ceil(rows / world)`` rows (DTensor's chunking: rank r holds rows
    ``[r * c, min((r + 1) * c, rows))``), into one flat buffer; the gathered buffer is cut back per rank and the
    valid rows concatenated: the same values as ``full_tensor()``, every byte sent once."""
    mesh = bucket[0][1].device_mesh
    world, group = mesh.size(), mesh.get_group()
    first = bucket[0][1]
    layout = []  # (name, full shape, padded rows per rank, elements per row, offset in the per-rank buffer)
    offset = 0
    for name, t in bucket:
        rows, inner = t.shape[0], math.prod(t.shape[1:])
        chunk = -(-rows // world)
        layout.append((name, tuple(t.shape), chunk, inner, offset))
        offset += chunk * inner
    local = torch.zeros(offset, dtype=first.dtype, device=first.to_local().device)
    for (name, shape, chunk, inner, off), (_, t) in zip(layout, bucket):
        shard = t.to_local().detach().reshape(-1)
        local[off : off + shard.numel()].copy_(shard)
    gathered = torch.empty(world * offset, dtype=local.dtype, device=local.device)
    if dist.get_backend(group) == "gloo":  # gloo has no all_gather_into_tensor: the list form, one collective too
        dist.all_gather(list(gathered.chunk(world)), local, group=group)
    else:
        dist.all_gather_into_tensor(gathered, local, group=group)
    per_rank = gathered.view(world, offset)
    for name, shape, chunk, inner, off in layout:
        rows = shape[0]
        pieces = [per_rank[r, off : off + chunk * inner].view(chunk, inner)[: max(0, min(chunk, rows - r * chunk))] for r in range(world)]
        yield name, torch.cat(pieces).view(shape)


def clip_grad_norm(params: list[torch.nn.Parameter], max_norm: float | None, experts=None) -> float:
    """Total L2 norm of the gradients (over all shards); clips them to ``max_norm`` if it is > 0.

    ``experts`` (:class:`rl_train_fsdp.experts.ExpertParallel`): its parameters' gradients are reduced over the
    expert-data-parallel ranks first and counted once each in the norm.
    """
    if experts is not None:
        return _clip_with_experts(params, max_norm, experts)
    grads = [p for p in params if p.grad is not None]
    if not grads:
        return 0.0
    limit = float(max_norm) if max_norm is not None and max_norm > 0 else math.inf
    norm = torch.nn.utils.clip_grad_norm_(grads, max_norm=limit)
    norm = full_tensor(norm)
    return float(norm)


def _clip_with_experts(params: list[torch.nn.Parameter], max_norm: float | None, experts) -> float:
    experts.reduce_grads()
    own = {id(p) for p in experts.params}
    rest = [p.grad for p in params if p.grad is not None and id(p) not in own]
    sq = experts.grad_norm_sq()
    if rest:
        sq = sq + float(full_tensor(torch.nn.utils.get_total_norm(rest))) ** 2
    norm = math.sqrt(float(sq))
    if max_norm is not None and max_norm > 0:
        coef = min(1.0, float(max_norm) / (norm + 1e-6))  # torch.nn.utils.clip_grad_norm_'s coefficient
        if coef < 1.0:
            with torch.no_grad():
                for p in params:
                    if p.grad is not None:
                        p.grad.mul_(coef)
    return norm


def all_reduce(value: torch.Tensor, op: str = "sum", group=None) -> torch.Tensor:
    """A reduced copy of ``value`` over all ranks or ``group`` (``sum``, ``max``, ``min`` or ``avg``); unchanged without a process group."""
    if not is_distributed():
        return value
    out = value.detach().clone()
    ops = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN, "avg": dist.ReduceOp.SUM}
    dist.all_reduce(out, op=ops[op], group=group)
    if op == "avg":
        out = out / dist.get_world_size(group)
    return out


def barrier() -> None:
    if is_distributed():
        dist.barrier()
