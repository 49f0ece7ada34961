"""Ulysses sequence parallelism for the FSDP backend (``actor.ulysses_sequence_parallel_size``).

The ranks are split into groups of ``size`` consecutive ranks (the controller gives
every rank of a group the same data: the group is one data-parallel rank, so the
data-parallel size is ``world / size``). A micro-batch is packed into one row
(:mod:`rl_train_fsdp.packing`), padded to a multiple of ``size``, and each
rank of the group runs its ``1 / size`` of the tokens through embeddings, MLPs and
norms. Around attention an all-to-all turns "my tokens, all heads" into "all tokens,
my heads" (``H / size`` query heads each), attention runs per sequence on the whole
row, and the reverse all-to-all brings the outputs back; key / value heads are
repeated first when ``size`` does not divide their count (as verl does), so the
query heads must be divisible by ``size`` (``rlcore check`` says so).

The heads (log-probs, entropy, values) of the response tokens predicted in a rank's
slice are summed over the group (:meth:`UlyssesGroup.gather`), whose backward passes the gradient through
unchanged: every rank computes the same loss, and each rank's backward covers its own
tokens, so the gradients summed over the group (FSDP's reduction over all ranks)
are the gradient of one copy of the loss.

Works with gloo (CPU; the tests) and NCCL (written for it, not run here: bench/two_gpu/run.py --part sp runs it on
two GPUs). What NCCL needs and gloo forgives is kept: every tensor handed to a collective is contiguous (the
all-to-all's chunks and outputs, the summed heads), all of one dtype per call (bf16 / float32), and on the rank's
own GPU; the groups come from ``dist.new_group`` on the workers' default group, called by every rank in the same
order, so NCCL's communicators are set up alike everywhere (their timeout is the default group's).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.distributed as dist
from rl_train_fsdp.packing import SEQLENS_KW, packed_attention, segment_attention

ATTENTION = "rlcore_ulysses"
GROUP_KW = "rlcore_sp"


class UlyssesGroup:
    """This rank's sequence-parallel group and data-parallel group (every rank must build it, in the same order)."""

    def __init__(self, size: int) -> None:
        world, rank = dist.get_world_size(), dist.get_rank()
        if size < 1 or world % size:
            raise ValueError(
                f"actor.ulysses_sequence_parallel_size={size} does not divide the {world} ranks; "
                f"choose a divisor of {world}: {', '.join(str(d) for d in range(1, world + 1) if world % d == 0)}"
            )
        self.size, self.rank = size, rank % size
        self.group = self.dp_group = None
        for g in range(world // size):  # consecutive ranks: the controller gives them the same shard
            ranks = list(range(g * size, (g + 1) * size))
            pg = dist.new_group(ranks)
            if rank in ranks:
                self.group = pg
        for i in range(size):
            ranks = list(range(i, world, size))
            pg = dist.new_group(ranks)
            if rank in ranks:
                self.dp_group = pg

    def attention_kwargs(self) -> dict[str, Any]:
        return {GROUP_KW: self}

    def gather(self, value: torch.Tensor) -> torch.Tensor:
        return _SumPassGrad.apply(value, self.group)


def kv_repeats(num_kv_heads: int, size: int) -> int:
    """How many times each key / value head is repeated so that ``size`` divides their count."""
    return size // math.gcd(num_kv_heads, size)


def _all_to_all(x: torch.Tensor, group, scatter_dim: int, gather_dim: int) -> torch.Tensor:
    size = dist.get_world_size(group)
    inputs = [t.contiguous() for t in x.chunk(size, dim=scatter_dim)]
    outputs = [torch.empty_like(inputs[0]) for _ in range(size)]
    dist.all_to_all(outputs, inputs, group=group)
    return torch.cat(outputs, dim=gather_dim)


class _AllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group, scatter_dim: int, gather_dim: int):
        ctx.group, ctx.scatter_dim, ctx.gather_dim = group, scatter_dim, gather_dim
        return _all_to_all(x, group, scatter_dim, gather_dim)

    @staticmethod
    def backward(ctx, grad):
        return _all_to_all(grad, ctx.group, ctx.gather_dim, ctx.scatter_dim), None, None, None


class _SumPassGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        out = x.clone(memory_format=torch.contiguous_format)  # NCCL takes contiguous tensors only (clone keeps strides)
        dist.all_reduce(out, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        return grad, None


@torch.compiler.disable  # collectives and per-sequence lengths stay out of model.compile's graphs
def ulysses_attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling: float | None = None, **kwargs):
    """transformers' attention-interface signature: ``[1, H, n, d]`` local tokens -> all-to-all -> per-sequence
    attention on the whole row with ``H / size`` heads -> all-to-all back; plain packed attention without a group."""
    sp: UlyssesGroup | None = kwargs.pop(GROUP_KW, None)
    seqlens = kwargs.get(SEQLENS_KW)
    if sp is None or sp.size == 1 or seqlens is None:
        return packed_attention(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
    kv = key.shape[1]
    if kv % sp.size:
        r = kv_repeats(kv, sp.size)
        key, value = key.repeat_interleave(r, dim=1), value.repeat_interleave(r, dim=1)
    q, k, v = (_AllToAll.apply(t, sp.group, 1, 2) for t in (query, key, value))  # [1, heads / size, N, d]
    out = segment_attention(q, k, v, seqlens, scaling, dropout if module.training else 0.0)
    out = _AllToAll.apply(out, sp.group, 2, 1)  # [1, H, n, d]
    return out.transpose(1, 2).contiguous(), None
