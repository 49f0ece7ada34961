"""Memory-lean response log-probs and entropy: the LM head applied ``chunk_size`` tokens at a time.

A plain forward materialises ``logits [b, R, V]`` plus float32 copies (GiBs for a large vocabulary).
:class:`ChunkedLogProbEntropy` holds one chunk of float32 logits at a time, its backward recomputing them; values
and gradients equal :func:`rl_core.modeling.forward_response` up to float rounding, in the same precision (autocast
dtype, else the weight's). The LM head's ``forward`` is replaced for one call so the chunks run *inside* the model's
forward, which keeps FSDP2 sound (the root unit owns the head; its backward hooks fire). A head that is not a plain
bias-free linear layer (Gemma's soft-capping) takes the plain path. Columns that are padding in every row are skipped.
"""

from __future__ import annotations

import contextlib
import inspect
from typing import Iterator

import torch

from rl_core.modeling import forward_response, pad_response_columns, response_columns_in_use
from rl_core.train_engine.batch_sizes import LOGPROB_CHUNK as DEFAULT_CHUNK
from rl_core.train_engine.shared_prompt import can_share_prompts, prompt_groups, shared_prompt_logits


class ChunkedLogProbEntropy(torch.autograd.Function):
    """Float32 ``(log_prob [N], entropy [N])`` of ``labels [N]`` under ``softmax(hidden [N, H] @ weight[V, H]^T / T)``;
    ``hidden`` and ``weight`` share the matmul dtype; ``want_entropy=False``: zeros."""

    @staticmethod
    def forward(ctx, hidden, weight, labels, temperature: float, chunk: int, want_entropy: bool):
        n = hidden.shape[0]
        lp = torch.empty(n, dtype=torch.float32, device=hidden.device)
        ent = torch.zeros(n, dtype=torch.float32, device=hidden.device)
        for s in range(0, n, chunk):
            z = _scaled_logits(hidden[s : s + chunk], weight, temperature)
            lse = torch.logsumexp(z, dim=-1)
            lp[s : s + chunk] = z.gather(-1, labels[s : s + chunk].unsqueeze(-1)).squeeze(-1) - lse
            if want_entropy:
                ent[s : s + chunk] = lse - (torch.softmax(z, dim=-1) * z).sum(-1)
            del z
        ctx.save_for_backward(hidden, weight, labels)
        ctx.temperature, ctx.chunk, ctx.want_entropy = temperature, chunk, want_entropy
        if not want_entropy:
            ctx.mark_non_differentiable(ent)
        return lp, ent

    @staticmethod
    def backward(ctx, g_lp, g_ent):
        hidden, weight, labels = ctx.saved_tensors
        T, chunk = ctx.temperature, ctx.chunk
        need_h, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        grad_h = torch.empty_like(hidden) if need_h else None
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if need_w else None
        use_ent = ctx.want_entropy and g_ent is not None
        for s in range(0, hidden.shape[0], chunk):
            h = hidden[s : s + chunk]
            z = _scaled_logits(h, weight, T)
            p = torch.softmax(z, dim=-1)
            gz = p * (-g_lp[s : s + chunk].unsqueeze(-1)) if g_lp is not None else torch.zeros_like(z)
            if g_lp is not None:
                gz.scatter_add_(-1, labels[s : s + chunk].unsqueeze(-1), g_lp[s : s + chunk].unsqueeze(-1))
            if use_ent:  # d entropy / dz_j = -p_j (z_j - E_p[z])
                ez = (p * z).sum(-1, keepdim=True)
                gz -= g_ent[s : s + chunk].unsqueeze(-1) * p * (z - ez)
            del z, p
            if T != 1.0:
                gz /= T
            gz = gz.to(weight.dtype)
            if need_h:
                grad_h[s : s + chunk] = gz @ weight
            if need_w:
                grad_w += (gz.t() @ h).float()
            del gz
        return grad_h, (grad_w.to(weight.dtype) if need_w else None), None, None, None, None


def _scaled_logits(h: torch.Tensor, weight: torch.Tensor, temperature: float) -> torch.Tensor:
    z = (h @ weight.t()).float()
    return z / temperature if temperature != 1.0 else z


def chunked_log_probs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    labels: torch.Tensor,
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
    entropy_grad: bool = True,
    chunk_size: int = DEFAULT_CHUNK,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(log_probs [...], entropy [...] or None)`` for ``hidden [..., H]``, ``labels [...]``, head ``weight [V, H]``."""
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    shape = labels.shape
    dev = hidden.device.type
    dtype = torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else weight.dtype
    with torch.autocast(device_type=dev, enabled=False):
        h = hidden.reshape(-1, hidden.shape[-1]).to(dtype)
        w = weight.to(dtype)
        lp, ent = ChunkedLogProbEntropy.apply(h, w, labels.reshape(-1), float(temperature), int(chunk_size), bool(with_entropy))
    if not with_entropy:
        return lp.view(shape), None
    ent = ent.view(shape)
    return lp.view(shape), (ent if entropy_grad else ent.detach())


def plain_head(model: torch.nn.Module) -> torch.nn.Module | None:
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if not isinstance(head, torch.nn.Linear) or head.bias is not None:
        return None
    if getattr(getattr(model, "config", None), "final_logit_softcapping", None):
        return None
    return head


@contextlib.contextmanager
def head_forward(head: torch.nn.Module, fn) -> Iterator[None]:
    head.forward = fn
    try:
        yield
    finally:
        del head.forward


def forward_response_chunked(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    responses: torch.Tensor,
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
    entropy_grad: bool = True,
    share_prompts: bool = False,
    chunk_size: int | None = DEFAULT_CHUNK,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """:func:`rl_core.modeling.forward_response` with the LM head in chunks (same contract, same numbers); ``chunk_size``
    None or 0, or a head that cannot be chunked, takes the plain path."""
    head = plain_head(model)
    if not chunk_size or head is None:
        return forward_response(
            model, input_ids, attention_mask, position_ids, responses,
            temperature=temperature, with_entropy=with_entropy, entropy_grad=entropy_grad, share_prompts=share_prompts,
        )
    R = responses.shape[-1]
    cut = R - response_columns_in_use(attention_mask, R)
    lead = leading_pad_columns(attention_mask, input_ids.shape[1] - R)
    if cut or lead:
        end = input_ids.shape[1] - cut
        input_ids, attention_mask, position_ids = (t[:, lead:end] for t in (input_ids, attention_mask, position_ids))
        responses = responses[:, : R - cut]
    r = R - cut
    kw = dict(temperature=temperature, with_entropy=with_entropy, entropy_grad=entropy_grad, chunk_size=int(chunk_size))
    if share_prompts and r < input_ids.shape[1] and can_share_prompts(model):
        groups = prompt_groups(input_ids, attention_mask, input_ids.shape[1] - r)
        if int(groups[-1]) + 1 < input_ids.shape[0]:
            with head_forward(head, lambda h: h):
                hidden = shared_prompt_logits(model, input_ids, attention_mask, position_ids, r, groups)
            return pad_response_columns(*chunked_log_probs(hidden, head.weight, responses, **kw), cut)

    def head_fn(h: torch.Tensor) -> torch.Tensor:
        lp, ent = chunked_log_probs(h[:, -r - 1 : -1], head.weight, responses, **kw)
        return torch.stack([lp, ent if ent is not None else torch.zeros_like(lp)], dim=-1)

    extra = {"logits_to_keep": r + 1} if "logits_to_keep" in inspect.signature(model.forward).parameters else {}
    with head_forward(head, head_fn):
        out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False, **extra).logits
    lp = out[..., 0]
    ent = out[..., 1] if with_entropy else None
    if ent is not None and not entropy_grad:
        ent = ent.detach()
    return pad_response_columns(lp, ent, cut)


def leading_pad_columns(attention_mask: torch.Tensor, prompt_length: int) -> int:
    """How many leading prompt columns are padding in every row (left padding shared by the whole batch)."""
    used = attention_mask[:, :prompt_length].bool().any(0).nonzero()
    return int(used.min()) if used.numel() else 0
