"""Packed sequences (verl's ``use_remove_padding``): a micro-batch's valid tokens in one row, no padding computed.

The padded layout of a micro-batch is ``[b, L]`` (left-padded prompts, right-padded
responses). :func:`pack` keeps only the tokens whose ``attention_mask`` is 1, in
row order, as one row ``[1, N]`` with each sequence's own position ids, and
records where every response token's predicting hidden state lands. Attention
keeps the sequences apart: the model runs with the attention implementation
:data:`ATTENTION` (registered in transformers' ``AttentionInterface``), which
splits the row at the sequence boundaries (``rlcore_seqlens``, a CPU tensor
passed down through the model's keyword arguments, so gradient checkpointing's
recompute sees them too; the attention function is left out of
``model.compile``'s graphs) and runs causal SDPA per sequence (``flash_attn_varlen_func``
on CUDA where flash-attn is installed). Without ``rlcore_seqlens`` it is plain
SDPA, so the same model also runs padded batches.

Log-probs / entropy (the LM head in chunks, :mod:`rl_core.logprobs`) and
critic values are taken at the packed positions and scattered back to the
padded ``[b, R]`` layout (padding positions hold 0; core masks them). The
numbers equal the padded computation up to float rounding (tests compare
loss and gradients, llama and qwen2 configs).

Sequence parallelism (a backend's :class:`SequenceShard`): the packed row is
padded to a multiple of the group size and each rank runs its slice of the
tokens; the backend's attention function exchanges heads for sequence around
attention, and ``gather`` sums the per-rank head outputs (each rank fills the
response tokens predicted in its slice).

Where it applies (:func:`can_pack`): models whose attention goes through
transformers' attention interface (``_supports_attention_backend``, Llama,
Qwen2, Mistral, ...) and, for log-probs, a plain bias-free LM head.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Protocol

import attrs
import torch
from rl_core.logprobs import head_forward, plain_head, chunked_log_probs

ATTENTION = "rlcore_packed"
DENSE_MASK_TOKENS = 8192  # CPU: packed rows up to this long use one masked SDPA call (an N x N bool mask, 64 MiB at most)
DENSE_MASK_MEAN_LEN = 256  # ... when their sequences are this short on average
SEQLENS_KW = "rlcore_seqlens"
# packing by default (use_remove_padding unset) on a GPU without flash-attn's varlen kernel: a micro-batch whose real
# tokens are at least this share of its padded size runs padded. Packed, such a batch pays one SDPA call per sequence
# for little saved compute: the 0.5B 4k row (97% real tokens) updated in 11.5 s packed vs 8.5 s padded on an H200,
# while a batch of 25% real tokens updated 1.84x faster packed (bench/long_context/results_h200)
PAD_WHEN_DENSER_THAN = 0.8


@attrs.frozen
class Packed:
    """One micro-batch packed into a row (see the module docstring)."""

    input_ids: torch.Tensor  # [1, N]
    position_ids: torch.Tensor  # [1, N]
    seqlens: tuple[int, ...]  # tokens per sequence, in row order (a trailing padding segment with ``pad_to``)
    pred_index: torch.Tensor  # [M] packed index of the hidden state that predicts each valid response token
    labels: torch.Tensor  # [M] those response tokens
    rows: torch.Tensor  # [M] where they go in the padded [b, R] layout
    cols: torch.Tensor  # [M]
    shape: tuple[int, int]  # (b, R)


class SequenceShard(Protocol):
    """A sequence-parallel group as the packed forward sees it (a backend's Ulysses group)."""

    size: int
    rank: int

    def attention_kwargs(self) -> dict[str, Any]:
        """Extra keyword arguments for the model's forward (reach the attention function)."""

    def gather(self, value: torch.Tensor) -> torch.Tensor:
        """The sum of ``value`` over the group; its gradient is passed through unchanged (every rank computes the
        same loss from the summed value, so each rank's backward covers its own tokens once)."""


def pack(input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor, response_length: int, *, pad_to: int = 1) -> Packed | None:
    """The packed row of a padded micro-batch; None when a response token's predecessor is padding (not packable)."""
    mask = attention_mask.bool()
    b, L = mask.shape
    R = response_length
    if R < 1 or R >= L:
        return None
    lens = mask.sum(1)
    where = mask.reshape(-1).cumsum(0) - 1  # packed index of each padded position (valid ones)
    where = where.view(b, L)
    rows, cols = mask[:, L - R :].nonzero(as_tuple=True)
    before = L - R + cols - 1
    if not bool(mask[rows, before].all()):
        return None
    ids, pos = input_ids[mask], position_ids[mask]
    seqlens = [int(n) for n in lens.tolist() if n > 0]
    extra = (-len(ids)) % pad_to
    if extra:
        ids = torch.cat([ids, ids.new_zeros(extra)])
        pos = torch.cat([pos, torch.arange(extra, dtype=pos.dtype, device=pos.device)])
        seqlens.append(extra)
    return Packed(
        input_ids=ids.unsqueeze(0), position_ids=pos.unsqueeze(0), seqlens=tuple(seqlens),
        pred_index=where[rows, before], labels=input_ids[rows, L - R + cols], rows=rows, cols=cols, shape=(b, R),
    )


def unpack(p: Packed, values: torch.Tensor) -> torch.Tensor:
    """``values [M]`` at the response tokens -> ``[b, R]`` (0 at padding); differentiable."""
    out = values.new_zeros(p.shape)
    return out.index_put((p.rows, p.cols), values)


# ------------------------------------------------------------------ attention
def segment_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, seqlens: tuple[int, ...] | torch.Tensor, scaling: float | None, dropout: float = 0.0) -> torch.Tensor:
    """Causal attention within each segment of a packed row: ``[1, H, N, d]`` (``key`` / ``value`` may have fewer
    heads: grouped-query attention) -> ``[1, H, N, d]``."""
    if torch.is_tensor(seqlens):
        seqlens = tuple(seqlens.tolist())
    groups = query.shape[1] // key.shape[1]
    if groups > 1:
        key = key.repeat_interleave(groups, dim=1)
        value = value.repeat_interleave(groups, dim=1)
    varlen = _flash_varlen() if query.is_cuda and query.dtype in (torch.float16, torch.bfloat16) else None
    if varlen is not None:
        cu = torch.tensor([0, *_cumsum(seqlens)], dtype=torch.int32, device=query.device)
        q, k, v = (t[0].transpose(0, 1) for t in (query, key, value))  # [N, H, d]
        out = varlen(q, k, v, cu, cu, max(seqlens), max(seqlens), dropout_p=dropout, softmax_scale=scaling, causal=True)
        return out.transpose(0, 1).unsqueeze(0)
    total = query.shape[2]
    if not query.is_cuda and len(seqlens) > 1 and total <= DENSE_MASK_TOKENS and total < DENSE_MASK_MEAN_LEN * len(seqlens):
        # many short sequences on the CPU: one SDPA call with a block-diagonal causal mask beats a call per sequence
        # (bench/long_context/packing_cpu.py's long sequences, mean 352 tokens, measured faster with a call each)
        seg = torch.repeat_interleave(torch.arange(len(seqlens), device=query.device), torch.tensor(seqlens, device=query.device))
        mask = (seg[:, None] == seg[None, :]).tril_()
        return torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=mask, dropout_p=dropout, scale=scaling)
    outs, start = [], 0
    for n in seqlens:
        end = start + n
        outs.append(torch.nn.functional.scaled_dot_product_attention(
            query[:, :, start:end], key[:, :, start:end], value[:, :, start:end], dropout_p=dropout, scale=scaling, is_causal=True,
        ))
        start = end
    return torch.cat(outs, dim=2)


def _cumsum(xs):
    total, out = 0, []
    for x in xs:
        total += x
        out.append(total)
    return out


def _flash_varlen():
    try:
        from flash_attn import flash_attn_varlen_func  # optional: where installed
    except ImportError:
        return None
    return flash_attn_varlen_func


@torch.compiler.disable  # model.compile: the decoder layers compile around it (no recompile per set of lengths)
def packed_attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling: float | None = None, **kwargs):
    """transformers' attention-interface signature: per-segment attention with ``rlcore_seqlens``, plain SDPA without."""
    seqlens = kwargs.pop(SEQLENS_KW, None)
    if seqlens is None:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
    out = segment_attention(query, key, value, seqlens, scaling, dropout if module.training else 0.0)
    return out.transpose(1, 2).contiguous(), None


def packed_mask(*args, attention_mask=None, **kwargs):
    """The mask for :data:`ATTENTION`: SDPA's for a padded batch; none for a packed row (its attention splits the
    row itself, so no ``[N, N]`` block-diagonal mask is built)."""
    if attention_mask is None:
        return None
    from transformers.masking_utils import sdpa_mask

    return sdpa_mask(*args, attention_mask=attention_mask, **kwargs)


def register_attention(name: str = ATTENTION, fn: Callable = packed_attention) -> None:
    """Register ``fn`` (and :func:`packed_mask`) under ``name`` in transformers' attention interfaces (idempotent)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(name, fn)
    AttentionMaskInterface.register(name, packed_mask)


#: decoder families whose attention is plain causal softmax attention through transformers' attention interface
PACKABLE_TYPES = frozenset({"llama", "qwen2", "qwen3", "mistral"})


def can_pack(model: torch.nn.Module) -> bool:
    """Packing is exact for ``model``: a family of :data:`PACKABLE_TYPES` without a sliding window in use."""
    cfg = getattr(model, "config", None)
    if cfg is None or getattr(cfg, "model_type", None) not in PACKABLE_TYPES or not getattr(model, "_supports_attention_backend", False):
        return False
    if getattr(cfg, "sliding_window", None) and getattr(cfg, "use_sliding_window", True):
        return False
    return not any(t != "full_attention" for t in (getattr(cfg, "layer_types", None) or ()))


def use_attention(model: torch.nn.Module, name: str = ATTENTION, fn: Callable = packed_attention) -> None:
    """Switch ``model`` (and its sub-configs) to the attention function ``fn`` registered as ``name``."""
    register_attention(name, fn)
    setter = getattr(model, "set_attn_implementation", None)
    try:
        if setter is None:
            raise AttributeError
        setter(name)
    except (AttributeError, ValueError, TypeError):
        model.config._attn_implementation = name


# ------------------------------------------------------------------ forwards
def _shard_slice(p: Packed, shard: SequenceShard | None) -> tuple[slice, int]:
    n = p.input_ids.shape[1]
    if shard is None or shard.size == 1:
        return slice(0, n), 0
    per = n // shard.size
    return slice(shard.rank * per, (shard.rank + 1) * per), shard.rank * per


def _local(p: Packed, shard: SequenceShard | None) -> tuple[torch.Tensor, torch.Tensor, dict[str, Any], torch.Tensor, torch.Tensor]:
    """(ids, positions, model kwargs, local predicting index, which response tokens are this rank's)."""
    sl, offset = _shard_slice(p, shard)
    # a CPU tensor, not a tuple: compiled decoder layers take it as an input instead of guarding on the lengths
    kw: dict[str, Any] = {SEQLENS_KW: torch.tensor(p.seqlens, dtype=torch.int64)}
    if shard is not None and shard.size > 1:
        kw.update(shard.attention_kwargs())
    mine = (p.pred_index >= sl.start) & (p.pred_index < sl.stop)
    return p.input_ids[:, sl], p.position_ids[:, sl], kw, p.pred_index[mine] - offset, mine


def _scatter_mine(values: torch.Tensor, mine: torch.Tensor, shard: SequenceShard | None) -> torch.Tensor:
    if shard is None or shard.size == 1:
        return values
    full = values.new_zeros(mine.shape[0]).index_put((mine.nonzero(as_tuple=True)[0],), values)
    return shard.gather(full)


def forward_log_probs_packed(
    model: torch.nn.Module,
    p: Packed,
    *,
    temperature: float,
    with_entropy: bool,
    entropy_grad: bool,
    chunk_size: int | None,
    shard: SequenceShard | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """``(log_probs [b, R], entropy [b, R] or None)`` of the packed micro-batch; None when the head cannot be chunked."""

    head = plain_head(model)
    if head is None:
        return None
    ids, pos, kw, local_pred, mine = _local(p, shard)
    labels = p.labels[mine]
    chunk = int(chunk_size) if chunk_size else max(1, int(local_pred.numel()))

    def head_fn(h: torch.Tensor) -> torch.Tensor:
        lp, ent = chunked_log_probs(h[0, local_pred], head.weight, labels, temperature=temperature, with_entropy=with_entropy,
                                    entropy_grad=True, chunk_size=chunk)
        return torch.stack([lp, ent if ent is not None else torch.zeros_like(lp)], dim=-1).unsqueeze(0)

    with head_forward(head, head_fn):
        out = model(input_ids=ids, position_ids=pos, attention_mask=None, use_cache=False, **kw).logits[0]
    lp = unpack(p, _scatter_mine(out[:, 0], mine, shard))
    if not with_entropy:
        return lp, None
    ent = unpack(p, _scatter_mine(out[:, 1], mine, shard))
    return lp, (ent if entropy_grad else ent.detach())


def forward_values_packed(model: torch.nn.Module, p: Packed, shard: SequenceShard | None = None) -> torch.Tensor:
    """Critic values ``[b, R]`` (float32) of the packed micro-batch: the value head before each response token."""
    ids, pos, kw, local_pred, mine = _local(p, shard)
    out = model(input_ids=ids, position_ids=pos, attention_mask=None, use_cache=False, **kw).logits
    return unpack(p, _scatter_mine(out[0, local_pred, 0].float(), mine, shard))


def run_padded(attention_mask: torch.Tensor, *, chosen_by_default: bool, sequence_parallel: bool) -> bool:
    """Whether a micro-batch packing was turned on for by default runs padded instead (:data:`PAD_WHEN_DENSER_THAN`):
    on CUDA without flash-attn's varlen kernel, without sequence parallelism (which needs the packed layout). Both
    layouts give the same results; this picks the faster one."""
    if not chosen_by_default or sequence_parallel or not attention_mask.is_cuda or _flash_varlen() is not None:
        return False
    return int(attention_mask.sum()) >= PAD_WHEN_DENSER_THAN * attention_mask.numel()


def row_multiple(bucket: int | None, sequence_parallel: int = 1) -> int:
    """The packed row's length is padded to a multiple of this: the sequence-parallel group size, and with
    ``actor.pad_to_length`` also the backend's bucket in tokens (``bucket``; None without pad_to_length: verl's
    fixed packed shapes)."""
    if not bucket:
        return sequence_parallel
    return math.lcm(int(bucket), sequence_parallel)


def packing_enabled(config: Any, *, share_prompts: bool = False) -> bool:
    """``actor.use_remove_padding``; None: on, except where the backend runs the shared-prompt forward
    (:mod:`rl_core.train_engine.shared_prompt`, the CPU default), which measured faster for groups of responses to one prompt."""
    value = getattr(config.actor, "use_remove_padding", None)
    if value is None and getattr(config.actor, "pad_to_length", False):
        return True  # fixed packed shapes asked for: packed, also where the shared-prompt forward would run
    return (not share_prompts) if value is None else bool(value)


__all__ = [
    "ATTENTION", "Packed", "SequenceShard", "pack", "unpack", "segment_attention", "packed_attention", "register_attention",
    "packed_mask", "can_pack", "use_attention", "forward_log_probs_packed", "forward_values_packed", "packing_enabled", "run_padded", "row_multiple",
]
