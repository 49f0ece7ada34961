"""Context parallelism (``train.context_parallel_size``, verl's ``megatron.context_parallel_size``) for the Megatron engine.

megatron-core's own context parallelism lives in TransformerEngine's attention, which the engine does not use (it
builds megatron-core's local layer spec: ``DotProductAttention``, which refuses CP). This module is an exact CP for
that spec, laid out as Megatron lays it out:

Sequence split
    The columns of a batch (right-padded to a multiple of ``2 * cp``) are cut into ``2 * cp`` equal chunks; CP
    rank ``r`` holds chunks ``r`` and ``2 * cp - 1 - r`` (so every rank gets the same share of the causal
    attention's work). Position ids stay global (the rotary angles of each token are its own), and the attention
    mask of a rank's queries is built from their global columns: causal over the whole sequence, padding keys hidden.
Attention
    :class:`ContextParallelAttention` all-gathers the keys and values of the CP group (after the rotary embedding),
    puts them in the sequence's order and runs megatron-core's ``DotProductAttention`` (computed by torch's fused
    attention, :class:`rl_train_megatron.sdpa.SDPAttention`) for this rank's queries
    against the whole sequence. Backward: each rank's gradient of the gathered keys / values is summed over the
    group and every rank keeps its own columns (reduce-scatter; all-reduce + slice on gloo).
Results
    Per-token results (log-probs, entropy, values) are computed for this rank's columns that predict a response token
    (the LM head sees no prompt column) and all-gathered into the sequence's order (:func:`gather_columns`); every CP rank computes the same loss from them, so the backward of
    the gather keeps this rank's columns of the gradient. The weights' gradients of the CP ranks are then summed
    (the data-parallel group *with* CP, :func:`rl_train_megatron.parallel.grad_group`).

The CP group is megatron-core's (``initialize_model_parallel(context_parallel_size=...)``); the model's
``TransformerConfig`` keeps ``context_parallel_size=1`` because nothing in it sees more than this module passes it.
"""

from __future__ import annotations

import functools

import attrs
import torch
import torch.distributed as dist

from rl_train_megatron.sdpa import SDPAttention


def cp_group():
    from megatron.core import parallel_state as mpu

    return mpu.get_context_parallel_group()


@functools.lru_cache(maxsize=64)
def _columns(s_pad: int, cp: int) -> tuple[tuple[int, ...], ...]:
    """Each CP rank's global columns, in the order it holds them (chunk ``r``, then chunk ``2cp - 1 - r``)."""
    c = s_pad // (2 * cp)
    return tuple(tuple(range(r * c, (r + 1) * c)) + tuple(range((2 * cp - 1 - r) * c, (2 * cp - r) * c)) for r in range(cp))


def rank_columns(s_pad: int, cp: int, rank: int, device=None) -> torch.Tensor:
    """``[s_pad / cp]`` global columns held by CP rank ``rank``."""
    return torch.tensor(_columns(s_pad, cp)[rank], dtype=torch.long, device=device)


def gathered_order(s_pad: int, cp: int, device=None) -> torch.Tensor:
    """Index that puts the CP ranks' gathered columns (rank 0's, rank 1's, ...) back in the sequence's order."""
    flat = torch.tensor([c for cols in _columns(s_pad, cp) for c in cols], dtype=torch.long)
    return torch.argsort(flat).to(device)


@attrs.frozen
class SeqSplit:
    """This rank's share of a batch's ``s`` columns (padded to ``s_pad``)."""

    cp: int
    rank: int
    s: int
    s_pad: int
    columns: torch.Tensor  # [s_pad / cp] global columns of this rank

    @classmethod
    def of(cls, s: int, cp: int, rank: int, device, multiple: int = 1) -> "SeqSplit":
        """``multiple``: each rank's ``s_pad / cp`` columns a multiple of it too (sequence parallelism: TP)."""
        s_pad = -(-s // (2 * cp * multiple)) * 2 * cp * multiple
        return cls(cp=cp, rank=rank, s=s, s_pad=s_pad, columns=rank_columns(s_pad, cp, rank, device))

    def pad(self, t: torch.Tensor, value=0) -> torch.Tensor:
        """``[b, s] -> [b, s_pad]`` (right-padded: the causal mask keeps the added columns out of every real token's view)."""
        return torch.nn.functional.pad(t, (0, self.s_pad - self.s), value=value) if self.s_pad > self.s else t

    def local(self, t: torch.Tensor, value=0) -> torch.Tensor:
        """This rank's columns of a ``[b, s]`` tensor."""
        return self.pad(t, value).index_select(1, self.columns)

    def mask(self, attention: torch.Tensor) -> torch.Tensor:
        """``[b, 1, s_pad / cp, s_pad]`` bool, True where this rank's query may not look: a later column or a padding key."""
        keys = torch.arange(self.s_pad, device=attention.device)
        causal = keys[None, :] > self.columns[:, None]
        return causal[None, None] | ~self.pad(attention).bool()[:, None, None, :]

    def labels(self, input_ids: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
        """This rank's next-token labels ``[b, s_pad / cp]``: the token after each column (the responses for the last
        ``R`` predicting columns; 0 where there is no next token)."""
        b, R = responses.shape
        full = torch.zeros(b, self.s_pad, dtype=input_ids.dtype, device=input_ids.device)
        full[:, : self.s - 1] = input_ids[:, 1:]
        full[:, self.s - R - 1 : self.s - 1] = responses
        return full.index_select(1, self.columns)

    def predicting(self, R: int) -> torch.Tensor:
        """Positions (in this rank's columns) of the columns that predict the last ``R`` tokens: the only ones whose
        logits / values are computed."""
        c = self.columns
        return torch.nonzero((c >= self.s - R - 1) & (c < self.s - 1)).flatten()

    def response(self, t: torch.Tensor, R: int, picked: torch.Tensor) -> torch.Tensor:
        """``[b, len(picked)]`` results at this rank's :meth:`predicting` columns -> ``[b, R]`` of the whole response on
        every rank (zeros elsewhere, gathered; autograd: this rank's columns)."""
        mine = t.new_zeros(t.shape[0], self.columns.numel()).index_copy(1, picked, t)
        return gather_columns(mine, self)[:, self.s - R - 1 : self.s - 1]


def _world_rank(group) -> tuple[int, int]:
    return dist.get_world_size(group), dist.get_rank(group)


def _all_gather(x: torch.Tensor, dim: int, group) -> torch.Tensor:
    world, _ = _world_rank(group)
    parts = [torch.empty_like(x) for _ in range(world)]
    dist.all_gather(parts, x.contiguous(), group=group)
    return torch.cat(parts, dim)


class _GatherSumBack(torch.autograd.Function):
    """All-gather along ``dim``; backward: the gradients of every rank summed, this rank's part kept."""

    @staticmethod
    def forward(ctx, x, dim, group):
        ctx.dim, ctx.group = dim, group
        return _all_gather(x, dim, group)

    @staticmethod
    def backward(ctx, grad):
        world, rank = _world_rank(ctx.group)
        grad = grad.contiguous()
        n = grad.shape[ctx.dim] // world
        if dist.get_backend(ctx.group) == "nccl" and ctx.dim == 0:
            out = torch.empty((n, *grad.shape[1:]), dtype=grad.dtype, device=grad.device)
            dist.reduce_scatter_tensor(out, grad, group=ctx.group)
            return out, None, None
        total = grad.clone()
        dist.all_reduce(total, group=ctx.group)
        return total.narrow(ctx.dim, rank * n, n).contiguous(), None, None


class _GatherKeepOwn(torch.autograd.Function):
    """All-gather along ``dim``; backward: this rank's part of the gradient (every rank computed the same loss)."""

    @staticmethod
    def forward(ctx, x, dim, group):
        ctx.dim, ctx.group = dim, group
        return _all_gather(x, dim, group)

    @staticmethod
    def backward(ctx, grad):
        world, rank = _world_rank(ctx.group)
        n = grad.shape[ctx.dim] // world
        return grad.narrow(ctx.dim, rank * n, n).contiguous(), None, None


def gather_columns(t: torch.Tensor, split: SeqSplit, group=None) -> torch.Tensor:
    """``[b, s_pad / cp]`` of every CP rank -> ``[b, s_pad]`` in the sequence's order (autograd: this rank's columns)."""
    group = group if group is not None else cp_group()
    gathered = _GatherKeepOwn.apply(t, 1, group)
    return gathered.index_select(1, gathered_order(split.s_pad, split.cp, t.device))


class ContextParallelAttention(SDPAttention):
    """megatron-core's ``DotProductAttention`` (computed by :class:`rl_train_megatron.sdpa.SDPAttention`) over the CP group's whole sequence: this rank's queries
    ``[s_pad / cp, b, np, hn]``, the keys / values of every CP rank (all-gathered, in the sequence's order), the
    mask :meth:`SeqSplit.mask` built for this rank's columns."""

    def __init__(self, config, *args, **kwargs):
        super().__init__(config, *args, **kwargs)

    def forward(self, query, key, value, attention_mask, attn_mask_type=None, attention_bias=None, packed_seq_params=None):
        group = cp_group()
        cp = dist.get_world_size(group)
        if cp > 1:
            s_loc, hn = key.shape[0], key.shape[-1]
            kv = _GatherSumBack.apply(torch.cat((key, value), dim=-1), 0, group)  # one collective per layer
            kv = kv.index_select(0, gathered_order(s_loc * cp, cp, kv.device))
            key, value = kv[..., :hn].contiguous(), kv[..., hn:].contiguous()
        return super().forward(query, key, value, attention_mask, attn_mask_type, attention_bias, packed_seq_params)


