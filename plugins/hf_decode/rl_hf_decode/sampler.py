"""The static decoder's sampler as one Triton kernel: a token (and its log-prob) per row from float32 logits, with
the plain loop's inverse-CDF draw and one read and a partial second read of the logits.

The plain loop's sampler (``rl_core.rollout.hf._sample``) without top-k / top-p runs a softmax, a cumulative sum, a
search and a log-sum-exp over the ``[rows, vocab]`` logits: on an H200 (1.5B shape, 256 rows, a vocabulary of 50,257)
those took ~0.4 ms of a 4.1 ms decode step, the cumulative sum alone 0.16 ms at ~0.6 TB/s
(bench/results/rollout_speed_h200_s23). Here a program handles one row: pass 1 keeps a running maximum and sum of
``exp(x / T - max)`` (element-wise, merged once at the end); pass 2 walks the blocks again, adding up the
unnormalised probabilities until they exceed ``u x sum`` for the row's uniform draw ``u``, and stops reading once
it has (the remaining blocks are skipped). The token is the first index whose cumulative mass exceeds the draw
(the same rule as ``searchsorted(cdf, u x cdf[-1], right=True)``); its log-prob is ``x / T - max - log(sum)``.

The draw is ``torch.rand(rows, 1)`` from the rollout's generator, the same call as the plain loop's, so a seeded
run draws the same uniforms with either sampler; tokens then agree except where a draw falls within float rounding
of a boundary between two tokens (the sums are added in another order). :func:`check` verifies the kernel once per
decoder against a float64 reference (:mod:`rl_hf_decode.static_decode`); on a CPU the kernel runs under Triton's
interpreter (``TRITON_INTERPRET=1``), for the tests.
"""

from __future__ import annotations

import torch

from rl_hf_decode.decode_attention import kernel_or, tl, triton
from rl_hf_decode.keys import SAMPLER

BLOCK = 4096  # logits a program reads per iteration (16 per thread with 8 warps)
NUM_WARPS = 8
LOG_PROB_TOL = 1e-4  # check(): log-probs against float64


if triton is not None:

    @triton.jit
    def _sample_kernel(LOGITS, s_row, U, TOKEN, LP, inv_temp, V: tl.constexpr, BLOCK: tl.constexpr, WANT_LP: tl.constexpr):
        row = tl.program_id(0)
        base = LOGITS + row * s_row
        n = tl.arange(0, BLOCK)
        # pass 1: element-wise running max and sum of exp, merged at the end
        m = tl.full([BLOCK], float("-inf"), tl.float32)
        s = tl.zeros([BLOCK], tl.float32)
        for start in range(0, V, BLOCK):
            idx = start + n
            x = tl.load(base + idx, mask=idx < V, other=float("-inf")).to(tl.float32) * inv_temp
            m_new = tl.maximum(m, x)
            m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # nothing finite yet: exp(-inf) = 0, no nan
            s = s * tl.exp(m - m_use) + tl.exp(x - m_use)
            m = m_new
        top = tl.max(m, 0)
        total = tl.sum(s * tl.exp(m - top), 0)
        target = tl.load(U + row) * total
        # pass 2: cumulative mass up to the first index above the target; blocks after it are not read
        acc = tl.zeros([], tl.float32)
        pick = tl.full([], V, tl.int32)  # V: not found yet
        last = tl.full([], -1, tl.int32)  # the last index with mass (a draw rounded past the total takes it)
        for start in range(0, V, BLOCK):
            if acc <= target:
                idx = start + n
                inb = idx < V
                x = tl.load(base + idx, mask=inb, other=float("-inf")).to(tl.float32) * inv_temp
                e = tl.exp(x - top)
                c = tl.cumsum(e, 0) + acc
                pick = tl.minimum(pick, tl.min(tl.where((c > target) & inb, idx, V), 0))
                last = tl.maximum(last, tl.max(tl.where(e > 0.0, idx, -1), 0))
                acc = acc + tl.sum(e, 0)
        pick = tl.where(pick == V, last, pick)
        tl.store(TOKEN + row, pick.to(tl.int64))
        if WANT_LP:
            chosen = tl.load(base + pick).to(tl.float32) * inv_temp
            tl.store(LP + row, chosen - top - tl.log(total))


def sample(logits: torch.Tensor, u: torch.Tensor, temperature: float, want_log_prob: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(token [rows] int64, log_prob [rows] or None)`` for float32 ``logits [rows, vocab]`` (last dim contiguous)
    and one uniform ``u [rows, 1]`` in [0, 1) per row, at ``temperature`` > 0."""
    rows, vocab = logits.shape
    if logits.dtype != torch.float32 or logits.stride(-1) != 1:
        raise ValueError("the fused sampler needs float32 logits with a contiguous last dimension")
    token = torch.empty(rows, dtype=torch.long, device=logits.device)
    lp = torch.empty(rows, dtype=torch.float32, device=logits.device) if want_log_prob else token
    _sample_kernel[(rows,)](logits, logits.stride(0), u, token, lp, 1.0 / float(temperature),
                            V=vocab, BLOCK=BLOCK, WANT_LP=bool(want_log_prob), num_warps=NUM_WARPS)
    return token, (lp if want_log_prob else None)


def eligible(sampling: dict | None, vocab: int) -> bool:
    """Whether ``sampling`` (the hf rollout's settings) is plain temperature sampling, the case the kernel covers:
    not greedy, no top-k below the vocabulary, no top-p below 1."""
    if not sampling or sampling.get("greedy"):
        return False
    top_k, top_p = sampling.get("top_k"), sampling.get("top_p")
    return not (top_k is not None and 0 < top_k < vocab) and not (top_p is not None and top_p < 1.0) and sampling.get("temperature", 1.0) > 0


def choose(wanted: str, device: torch.device) -> str:
    """``triton`` or ``torch`` for ``engine_kwargs.decode_sampler``: ``auto`` takes the kernel where it can run."""
    return kernel_or("decode_sampler", wanted, SAMPLER, "torch", device)


def check(vocab: int, device: torch.device) -> str | None:
    """What is wrong with the kernel here (None: nothing), against float64 on random logits of ``vocab`` entries:
    every token's cumulative interval holds its draw, and its log-prob matches. Peaked and flat rows, a row with
    -inf entries, draws of 0 and just below 1, a temperature of 0.7."""
    gen = torch.Generator(device=device).manual_seed(0)
    rows = 8
    x = torch.randn((rows, vocab), generator=gen, device=device) * torch.tensor([0.1, 1, 3, 10, 1, 1, 30, 1], device=device)[:, None]
    x[4, ::3] = float("-inf")
    u = torch.rand((rows, 1), generator=gen, device=device)
    u[5, 0], u[6, 0] = 0.0, 1.0 - 2**-24
    for temperature in (1.0, 0.7):
        token, lp = sample(x, u, temperature, True)
        ref = torch.log_softmax(x.double() / temperature, dim=-1)
        p = ref.exp()
        upper = p.cumsum(dim=-1).gather(1, token[:, None])[:, 0]
        lower = upper - p.gather(1, token[:, None])[:, 0]
        draw = u[:, 0].double()
        bad = ((draw < lower - 1e-5) | (draw > upper + 1e-5)).nonzero()
        if len(bad):
            r = int(bad[0, 0])
            return f"row {r}: token {int(token[r])} covers [{float(lower[r]):.6f}, {float(upper[r]):.6f}], the draw was {float(draw[r]):.6f}"
        err = float((lp.double() - ref.gather(1, token[:, None])[:, 0]).abs().max())
        if not err <= LOG_PROB_TOL:
            return f"log-probs differ from float64 by {err:.3g} (temperature {temperature})"
    return None


__all__ = ["BLOCK", "SAMPLER", "check", "choose", "eligible", "sample"]
