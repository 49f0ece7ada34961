"""Exact mode's canonical forward (``rollout.exact=true``; docs/exact.md): the rollout's log-probs and the trainer's, bit for bit.

Both sides compute a response's log-probs with :func:`sequence_log_probs`, one canonical forward per sequence: its
real tokens only (no padding, no packing, no other row in the batch), positions ``0..L-1``, the LM head on the
response's positions, float32 log-softmax. The shapes, the kernels and the reduction order are then those of that
sequence alone, so neither the micro-batch it lands in, nor padding, nor packing, nor the number of processes
changes a bit. It is this package's :class:`~rl_core.cards.LogProbForwardCard` (``exact``): the Plan loads it, the
workers hand it to the engines as ``WorkerContext.log_prob_forward``; the hf rollout runs it on its synced copy of
the weights after decoding, the fsdp backend in its forward (the old-log-prob pass and the update, gradients
flowing). In bf16 the trainer computes with its weights cast to bf16 (as FSDP2's mixed precision does when
sharded; unsharded it would otherwise autocast with a float32 residual stream, which the rollout's bf16 model does
not have). The tokens themselves are drawn from the decode loop's logits (KV cache, batched): those equal the
canonical ones to bf16 rounding, not bit for bit; the log-probs every ratio and correction reads are the canonical
ones on both sides.
"""

from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist


def sequence_log_probs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    responses: torch.Tensor,
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
    entropy_grad: bool = True,
    compute_dtype: torch.dtype | None = None,
    lockstep: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(log_probs [b, R], entropy [b, R] or None)`` (float32) of ``responses [b, R]``, one forward per sequence.

    ``input_ids`` / ``attention_mask`` ``[b, P + R]``: left-padded prompts then the responses (a response's real
    tokens are contiguous from column ``P``). Each row runs alone on its real tokens (prompt and response but the
    last, whose prediction nobody reads), positions from 0, the causal mask of the model's attention; the LM head
    sees only the response's positions. Columns past a response's end hold 0. Gradients flow when grad is on.
    ``compute_dtype``: run with the floating weights cast to it (differentiably; the trainer's bf16 over float32
    weights), autocast off. ``lockstep``: the model's forwards run collectives (FSDP2's all-gathers when sharded):
    every rank of the default process group runs as many forwards as the rank with the most, the extra ones on a
    one-token dummy whose output enters the result times 0 (its backward runs too; no number changes).
    """
    b, R = responses.shape
    P = input_ids.shape[1] - R
    T = 1.0 if temperature is None or temperature <= 0 else float(temperature)
    lp = torch.zeros((b, R), dtype=torch.float32, device=input_ids.device)
    ent = torch.zeros((b, R), dtype=torch.float32, device=input_ids.device) if with_entropy else None
    lp_rows, ent_rows = [], []
    keep = None  # the lockstep dummies' outputs, times 0
    # before any forward: the collectives of every rank must come in the same order
    extra = _lockstep_extra(int((attention_mask[:, P:].sum(-1) > 0).sum()), input_ids.device) if lockstep else 0
    with _casting(model, compute_dtype) as run:
        for i in range(b):
            real = attention_mask[i].bool()
            n = int(attention_mask[i, P:].sum())
            if n == 0:
                lp_rows.append(None)
                ent_rows.append(None)
                continue
            seq = input_ids[i][real]
            L = seq.numel()
            if L - n < 1:
                raise ValueError(f"row {i} has no prompt token: the first response token has nothing to be predicted from")
            pos = torch.arange(L - 1, device=seq.device).unsqueeze(0)
            out = run(input_ids=seq[:-1].unsqueeze(0), position_ids=pos, use_cache=False, logits_to_keep=n)
            z = out.logits[0, -n:].float()
            if T != 1.0:
                z = z / T
            logp = torch.log_softmax(z, dim=-1)
            lp_rows.append(logp.gather(-1, seq[L - n :].unsqueeze(-1)).squeeze(-1))
            if with_entropy:
                e = -(logp.exp() * logp).sum(-1)
                ent_rows.append(e if entropy_grad else e.detach())
        dummy = input_ids[:1, :1] if b else torch.zeros((1, 1), dtype=torch.long, device=input_ids.device)
        for _ in range(extra):
            out = run(input_ids=dummy, position_ids=torch.zeros_like(dummy), use_cache=False, logits_to_keep=1)
            if torch.is_grad_enabled():
                keep = 0.0 * out.logits.float().sum() + (0.0 if keep is None else keep)
    # assembled out of place so gradients reach every row
    lp = torch.stack([torch.cat([r, lp.new_zeros(R - r.numel())]) if r is not None else lp.new_zeros(R) for r in lp_rows]) if b else lp
    if with_entropy and b:
        ent = torch.stack([torch.cat([e, ent.new_zeros(R - e.numel())]) if e is not None else ent.new_zeros(R) for e in ent_rows])
    return (lp if keep is None else lp + keep), ent


def _lockstep_extra(ran: int, device: torch.device) -> int:
    """How many more forwards than its ``ran`` this rank runs: the most any rank of the default group ran, minus ``ran``."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return 0
    most = torch.tensor([ran], dtype=torch.long, device=device if dist.get_backend() == "nccl" else "cpu")
    dist.all_reduce(most, op=dist.ReduceOp.MAX)
    return int(most.item()) - ran


@contextlib.contextmanager
def _casting(model: torch.nn.Module, dtype: torch.dtype | None):
    """A callable running ``model`` (its floating parameters cast to ``dtype`` when given), autocast off."""
    off = torch.autocast(device_type=_device_type(model), enabled=False) if torch.is_autocast_enabled(_device_type(model)) else contextlib.nullcontext()
    with off:
        if dtype is None:
            yield model
            return
        params = {n: (p.to(dtype) if p.is_floating_point() and p.dtype != dtype else p) for n, p in model.named_parameters()}

        def run(**kwargs):
            return torch.func.functional_call(model, params, args=(), kwargs=kwargs, strict=False)

        yield run


def _device_type(model: torch.nn.Module) -> str:
    p = next(model.parameters(), None)
    return p.device.type if p is not None else "cpu"
