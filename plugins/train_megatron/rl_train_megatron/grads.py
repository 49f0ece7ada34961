"""Gradients of a Megatron model after the micro-batches of a mini-batch: tied copies, data-parallel sum, clipping.

Megatron-core's ``clip_grads`` and optimizers assert CUDA tensors, so the norm
and the clipping are computed here as ``torch.nn.utils.clip_grad_norm_`` does,
over the whole model: TP-sharded tensors count on every TP rank, replicated ones
on TP rank 0, the tied embedding once (on the first stage); summed over TP x PP. Routed experts (MoE) are
counted on each rank that holds a distinct shard of them (expert TP x EP x PP ranks) and summed over that group.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

from rl_train_megatron import parallel


def reduce_tied_embedding_grads(model: torch.nn.Module, pp_tied: bool) -> None:
    """PP > 1 with tied embeddings (``pp_tied``): first and last stage add up their gradients of the shared weight."""
    from megatron.core import parallel_state as mpu

    if not (pp_tied and mpu.is_rank_in_embedding_group()):
        return
    weight = model.shared_embedding_or_output_weight()
    if weight.grad is None:
        weight.grad = torch.zeros_like(weight)
    dist.all_reduce(weight.grad, group=mpu.get_embedding_group())


def reduce_grads(params: list[torch.nn.Parameter], group) -> None:
    """Sum the gradients over the data-parallel group, one flat buffer per dtype.

    A parameter without a gradient (a rank that ran no micro-batch: every row had a zero advantage) gets zeros,
    so every rank's buffer has the same layout.
    """
    if not params or dist.get_world_size(group) == 1:
        return
    from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    grads = [p.grad for p in params]
    flat = _flatten_dense_tensors(grads)
    dist.all_reduce(flat, group=group)
    for g, new in zip(grads, _unflatten_dense_tensors(flat, grads)):
        g.copy_(new)


def _square_sum(params: list[torch.nn.Parameter], device: torch.device) -> torch.Tensor:
    from rl_train_megatron.fully_sharded import local

    sq = torch.zeros((), dtype=torch.float32, device=device)
    for p in params:
        if p.grad is not None:
            sq += local(p.grad).detach().float().pow(2).sum()
    return sq


def clip_grad_norm(
    params: list[torch.nn.Parameter], counted: list[torch.nn.Parameter], max_norm: float | None, device: torch.device,
    experts: list[torch.nn.Parameter] = (), expert_group=None, dp_group=None,
) -> float:
    """Whole-model L2 norm of the gradients of ``counted`` (this rank's share), summed over TP x PP, plus those of
    ``experts`` summed over ``expert_group``; clips every gradient of ``params`` to ``max_norm`` (> 0) as
    ``clip_grad_norm_`` does. Gradients sharded over the data-parallel ranks (train.options.fully_shard: DTensor
    shards, :mod:`rl_train_megatron.fully_sharded`) count their local shard, summed over ``dp_group`` first."""
    from rl_train_megatron.fully_sharded import local

    sq = _square_sum(counted, device)
    if dp_group is not None:
        sq = parallel.all_reduce(sq, "sum", dp_group)
    sq = parallel.all_reduce(sq, "sum", parallel.mp_group())
    if expert_group is not None:
        sq = sq + parallel.all_reduce(_square_sum(list(experts), device), "sum", expert_group)
    norm = float(sq.sqrt())
    grads = [local(p.grad) for p in params if p.grad is not None]
    if grads and math.isfinite(norm) and max_norm is not None and max_norm > 0:
        torch._foreach_mul_(grads, min(1.0, max_norm / (norm + 1e-6)))
    return norm
