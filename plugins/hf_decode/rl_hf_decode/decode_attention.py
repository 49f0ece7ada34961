"""The static decoder's decode attention as one Triton kernel: one query token per row, read from the slot-major
cache only up to the slot this step wrote.

``scaled_dot_product_attention`` over a capacity view (:mod:`rl_hf_decode.static_decode`) reads every slot of the
capacity, ``chunk / 2`` slots past the responses on average, and its flash kernels tile the queries in blocks of 64
rows while a decode step has ``heads / kv heads`` of them (6 for Qwen2.5-1.5B): on an H200 (1.5B shape, 256 rows,
512 new tokens) its attention took 1.5 ms a step, about half the bandwidth of reading that cache
(bench/results/rollout_speed_h200_s22). Here a program handles one (row, kv head, split of the slots): it loads the
grouped query heads once (padded to 16, the smallest ``tl.dot``), streams the keys and values of slots
``[start, min(end, slot + 1))`` in blocks of :data:`BLOCK_N`, masks the slots a row never filled (left padding), and
keeps an online softmax in float32. With few rows the slots are split over more programs (flash-decoding) and the
partial results are merged by their log-sum-exp. The slot this step wrote is read from the device (the cache's
``slot`` tensor), so one captured CUDA graph serves every step of a capacity.

:func:`decode_attention` is a ``torch.library`` custom op (opaque to ``torch.compile``, captured into the step's
CUDA graph like any kernel). :func:`reason_unavailable` says why it cannot run (no Triton, not CUDA); the decoder
then keeps ``scaled_dot_product_attention``. On a CPU the same kernel runs under Triton's interpreter
(``TRITON_INTERPRET=1`` set before this module is imported): the tests compare it there with a plain softmax.
"""

from __future__ import annotations

import math
import os

import torch

try:  # Triton comes with CUDA builds of torch; a CPU build has none
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - exercised where triton is absent
    triton = None
    tl = None

BLOCK_N = 64  # cache slots a program reads per iteration
MIN_Q = 16  # tl.dot's smallest tile: the grouped query heads are padded to this
PROGRAMS_PER_SM = 2  # with fewer (row, kv head) programs than this x the SM count, the slots are split
MIN_SPLIT = 4 * BLOCK_N  # slots a split reads at the least (a merge costs more than a short split saves)
NUM_WARPS, NUM_STAGES = 4, 3  # per program; 3 stages: 2 key / value tiles of 64 slots in flight, 70 KiB of shared memory (bf16, d 128)


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on")


def reason_unavailable(device: torch.device) -> str | None:
    """Why the kernel cannot run on ``device`` (None: it can)."""
    if triton is None:
        return "triton is not installed"
    if device.type != "cuda" and not _interpreting():
        return f"the device is {device.type}, not cuda (TRITON_INTERPRET=1 runs the kernel on a CPU, for tests)"
    return None


def kernel_or(key: str, wanted: str, values: tuple[str, ...], other: str, device: torch.device) -> str:
    """``triton`` or ``other`` for ``rollout.engine_kwargs.<key>`` = ``wanted`` (one of ``values``: ``auto``,
    ``triton``, ``other``): ``auto`` takes the Triton kernel where it can run, ``triton`` where it cannot is refused."""
    if wanted not in values:
        raise ValueError(f"rollout.engine_kwargs.{key} must be one of {', '.join(values)}, got {wanted!r}")
    reason = reason_unavailable(device) if wanted != other else None
    if wanted == "triton" and reason:
        raise ValueError(f"rollout.engine_kwargs.{key}=triton cannot run here: {reason}; "
                         f"use rollout.engine_kwargs.{key}=auto (the kernel where it runs, {other} elsewhere)")
    return other if wanted == other or reason else "triton"


if triton is not None:

    @triton.jit
    def _block(Q_tile, K, V, VALID, s, end, b, kvh, d, dm, s_ks, s_kb, s_kh, s_vs, s_vb, s_vh, s_ms, s_mb, scale, m_i, l_i, acc,
               PRECISION: tl.constexpr, INTERPRET: tl.constexpr, D: tl.constexpr, D_PAD: tl.constexpr):
        """Slots ``s`` (one block) into the online softmax ``(m_i, l_i, acc)``; slots at or past ``end`` are not read.
        The interpreter's ``tl.dot`` is wrong on bfloat16 (Triton 3.6): there the tiles are multiplied in float32."""
        inb = s < end
        # a mask along the head dim (only when it is not a power of two) would keep the loads from being vectorised
        kmask = inb[:, None] & dm[None, :] if D_PAD != D else inb[:, None]
        ok = tl.load(VALID + s * s_ms + b * s_mb, mask=inb, other=0) != 0
        k = tl.load(K + s[:, None] * s_ks + b * s_kb + kvh * s_kh + d[None, :], mask=kmask, other=0.0)
        if INTERPRET:
            Q_tile = Q_tile.to(tl.float32)
            k = k.to(tl.float32)
        scores = tl.dot(Q_tile, tl.trans(k), input_precision=PRECISION) * scale
        scores = tl.where(ok[None, :], scores, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(scores, 1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with no valid slot yet: exp(-inf) = 0, no nan
        alpha = tl.exp(m_i - m_use)
        p = tl.exp(scores - m_use[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(V + s[:, None] * s_vs + b * s_vb + kvh * s_vh + d[None, :], mask=kmask, other=0.0)
        if INTERPRET:
            acc = acc * alpha[:, None] + tl.dot(p, v.to(tl.float32), input_precision=PRECISION)
        else:
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        return m_new, l_i, acc

    @triton.jit
    def _decode_kernel(Q, K, V, VALID, SLOT, ACC, ML,
                       s_qb, s_qh, s_ks, s_kb, s_kh, s_vs, s_vb, s_vh, s_ms, s_mb, s_ab, s_ah, s_asp,
                       scale, split_len,
                       KV: tl.constexpr, G: tl.constexpr, G_PAD: tl.constexpr, D: tl.constexpr, D_PAD: tl.constexpr,
                       BLOCK: tl.constexpr, ONE_SPLIT: tl.constexpr, PRECISION: tl.constexpr, INTERPRET: tl.constexpr, N_BLOCKS: tl.constexpr):
        pid = tl.program_id(0)
        b = pid // KV
        kvh = pid % KV
        sp = tl.program_id(1)
        last = tl.load(SLOT)  # the slot this step wrote: attend over slots 0 .. last
        start = sp * split_len
        end = tl.minimum(start + split_len, last + 1)
        g = tl.arange(0, G_PAD)
        d = tl.arange(0, D_PAD)
        n = tl.arange(0, BLOCK)
        gm = g < G
        dm = d < D
        q = tl.load(Q + b * s_qb + (kvh * G + g)[:, None] * s_qh + d[None, :], mask=gm[:, None] & dm[None, :], other=0.0)
        m_i = tl.full([G_PAD], float("-inf"), tl.float32)
        l_i = tl.zeros([G_PAD], tl.float32)
        acc = tl.zeros([G_PAD, D_PAD], tl.float32)
        if INTERPRET:  # Triton's CPU interpreter takes no tensor (nor int argument) as a loop bound: every block, masked
            for i in range(0, N_BLOCKS):
                m_i, l_i, acc = _block(q, K, V, VALID, start + i * BLOCK + n, end, b, kvh, d, dm, s_ks, s_kb, s_kh, s_vs, s_vb, s_vh,
                                       s_ms, s_mb, scale, m_i, l_i, acc, PRECISION, INTERPRET, D, D_PAD)
        else:  # on the GPU the loop stops at the step's slot
            for s0 in range(start, end, BLOCK):  # pipelined with the launch's num_stages (NUM_STAGES)
                m_i, l_i, acc = _block(q, K, V, VALID, s0 + n, end, b, kvh, d, dm, s_ks, s_kb, s_kh, s_vs, s_vb, s_vh,
                                       s_ms, s_mb, scale, m_i, l_i, acc, PRECISION, INTERPRET, D, D_PAD)
        heads = kvh * G + g
        where = ACC + b * s_ab + heads[:, None] * s_ah + sp * s_asp + d[None, :]
        if ONE_SPLIT:  # the finished output, in the query's dtype
            out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
            tl.store(where, out.to(ACC.dtype.element_ty), mask=gm[:, None] & dm[None, :])
        else:  # unnormalised partials and their (max, sum) for the merge
            tl.store(where, acc, mask=gm[:, None] & dm[None, :])
            ml = ML + (b * (KV * G) + heads) * (2 * tl.num_programs(1)) + sp * 2
            tl.store(ml, m_i, mask=gm)
            tl.store(ml + 1, l_i, mask=gm)


def splits_for(rows: int, kv_heads: int, capacity: int, sms: int) -> int:
    """Programs per (row, kv head): 1 when there are enough of those to fill the GPU, else enough splits of at least
    :data:`MIN_SPLIT` slots to reach ``PROGRAMS_PER_SM x sms`` programs."""
    programs = rows * kv_heads
    if programs >= PROGRAMS_PER_SM * sms:
        return 1
    return max(1, min(math.ceil(PROGRAMS_PER_SM * sms / programs), capacity // MIN_SPLIT))


@torch.library.custom_op("rl_hf_decode::decode_attention", mutates_args=())
def decode_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, valid: torch.Tensor, slot: torch.Tensor, scale: float,
                     splits: int) -> torch.Tensor:
    """``[rows, heads, d]`` attention output of one query token per row.

    ``q [rows, heads, d]`` (last dim contiguous); ``k``, ``v [cap, bucket, kv, d]`` (the cache's first ``cap`` slots,
    slot-major; ``rows <= bucket``); ``valid [cap, bucket]`` bool (slots holding a key of that row); ``slot [1]`` the
    slot this step wrote (slots after it are not read). Heads ``j * heads / kv .. (j + 1) * heads / kv - 1`` share kv
    head ``j``.
    """
    rows, heads, d = q.shape
    cap, _, kv, _ = k.shape
    group = heads // kv
    if q.stride(-1) != 1 or k.stride(-1) != 1 or v.stride(-1) != 1:
        raise ValueError("decode_attention: q, k and v need a contiguous last dimension")
    split_len = -(-cap // splits)
    out = torch.empty((rows, heads, d), dtype=q.dtype, device=q.device)
    if splits == 1:
        acc, ml = out, out  # ml is not touched with one split
        s_ab, s_ah, s_asp = out.stride(0), out.stride(1), 0
    else:
        acc = torch.empty((rows, heads, splits, d), dtype=torch.float32, device=q.device)
        ml = torch.empty((rows, heads, splits, 2), dtype=torch.float32, device=q.device)
        s_ab, s_ah, s_asp = acc.stride(0), acc.stride(1), acc.stride(2)
    flags = valid.view(torch.uint8)
    interpreting = _interpreting()
    _decode_kernel[(rows * kv, splits)](
        q, k, v, flags, slot, acc, ml,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), k.stride(2), v.stride(0), v.stride(1), v.stride(2),
        flags.stride(0), flags.stride(1), s_ab, s_ah, s_asp,
        float(scale), split_len,
        KV=kv, G=group, G_PAD=max(MIN_Q, triton.next_power_of_2(group)), D=d, D_PAD=max(MIN_Q, triton.next_power_of_2(d)),
        BLOCK=BLOCK_N, ONE_SPLIT=splits == 1, PRECISION="ieee" if q.dtype == torch.float32 else "tf32", INTERPRET=interpreting, N_BLOCKS=-(-split_len // BLOCK_N) if interpreting else 0, num_warps=NUM_WARPS, num_stages=NUM_STAGES,
    )
    if splits == 1:
        return out
    m, l = ml[..., 0], ml[..., 1]
    top = m.amax(dim=-1, keepdim=True)
    w = torch.exp(m - torch.where(torch.isinf(top), torch.zeros_like(top), top))  # empty splits: m = -inf, weight 0
    merged = (acc * w[..., None]).sum(dim=2) / (l * w).sum(dim=-1).clamp_min(torch.finfo(torch.float32).tiny)[..., None]
    return merged.to(q.dtype)


@decode_attention.register_fake
def _(q, k, v, valid, slot, scale, splits):
    return q.new_empty(q.shape)
