"""Forward passes that run each distinct prompt once for its group of responses, its KV cache repeated for the group's
rows (autograd flows through it: the same values and gradients as the plain forward, ``(n - 1) / n`` of the prompt
compute saved). Sound for a causal LM taking a KV cache (:mod:`rl_core.util.hf_cache`) and ``position_ids``, without
gradient checkpointing (transformers drops the cache under it); callers keep a plain path for everything else (FSDP
included: a module used twice in one forward is not something every FSDP version reduces correctly)."""

from __future__ import annotations

import inspect

import torch

from rl_core.util.hf_cache import cache_keyword, output_cache


def prompt_groups(input_ids: torch.Tensor, attention_mask: torch.Tensor, prompt_length: int) -> torch.Tensor:
    """Group index ``[b]`` of each row: consecutive rows with the same prompt tokens and mask share one."""
    ids = input_ids[:, :prompt_length]
    mask = attention_mask[:, :prompt_length]
    if ids.shape[0] == 0:
        return torch.zeros(0, dtype=torch.long, device=ids.device)
    new = torch.ones(ids.shape[0], dtype=torch.bool, device=ids.device)
    if ids.shape[0] > 1:
        same = (ids[1:] == ids[:-1]).all(-1) & (mask[1:] == mask[:-1]).all(-1)
        new[1:] = ~same
    return new.long().cumsum(0) - 1


def activation_checkpointing(model: torch.nn.Module) -> bool:
    """Whether activation (gradient) checkpointing is on. transformers >= 5.2x renamed ``is_gradient_checkpointing`` and
    warns on every read of the old name: read it only where the new one does not exist."""
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):
        if name in dir(type(model)):
            return bool(getattr(model, name))
    return False


def can_share_prompts(model: torch.nn.Module) -> bool:
    if activation_checkpointing(model):
        return False
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False
    return cache_keyword(model) is not None and "position_ids" in params


def shared_prompt_logits(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    response_length: int,
    groups: torch.Tensor,
) -> torch.Tensor:
    """Logits ``[b, R, V]`` for the last ``R`` tokens, the prompt run once per group (:func:`prompt_groups`)."""
    R = response_length
    P = input_ids.shape[1] - R
    if P < 1 or R < 1:
        raise ValueError(f"shared_prompt_logits needs a prompt and a response; got {P} prompt and {R} response columns")
    first = torch.ones_like(groups, dtype=torch.bool)
    first[1:] = groups[1:] != groups[:-1]
    heads = first.nonzero().flatten()
    out = model(
        input_ids=input_ids[heads, :P],
        attention_mask=attention_mask[heads, :P],
        position_ids=position_ids[heads, :P],
        use_cache=True,
        logits_to_keep=1,
    )
    cache = output_cache(out)
    first_logits = out.logits[:, -1:][groups]  # predicts response token 0
    if R == 1:
        return first_logits
    cache.batch_select_indices(groups)
    rest = model(
        input_ids=input_ids[:, P:-1],
        attention_mask=attention_mask[:, :-1],
        position_ids=position_ids[:, P:-1],
        use_cache=True,
        **{cache_keyword(model): cache},
    ).logits  # predicts response tokens 1 .. R-1
    return torch.cat([first_logits.to(rest.dtype), rest], dim=1)
