"""The rollout output contract, built once for every engine: :func:`rollout_batch` lays token ids out exactly as
:meth:`rl_core.backends.RolloutEngine.generate` promises (shapes, positions, the fields that ride along).
"""

from __future__ import annotations

import torch

from rl_core.batch import Batch
from rl_core.util.positions import position_ids_from_mask  # noqa: F401  (also importable from here)

GENERATED = frozenset({"prompts", "responses", "input_ids", "attention_mask", "position_ids", "response_mask", "rollout_log_probs"})


def rollout_batch(
    batch: Batch,
    n: int,
    responses: torch.Tensor,
    response_mask: torch.Tensor,
    log_probs: torch.Tensor | None = None,
    meta: dict | None = None,
    response_attention_mask: torch.Tensor | None = None,
) -> Batch:
    """The generate() output for prompts ``batch`` ([B, P], left-padded) and ``n`` samples each, from ``[B*n, R]``
    responses / masks / log-probs (a prompt's n adjacent; log-probs zeroed outside the mask). Positions continue from
    each prompt's last real token. ``response_attention_mask`` (multi-turn): also 1 on inserted tool / template tokens.
    """
    input_ids = batch.tensors["input_ids"].cpu()
    prompt_mask = batch.tensors["attention_mask"].cpu()
    R = responses.shape[1]
    prompts = input_ids.repeat_interleave(n, dim=0)
    pmask = prompt_mask.repeat_interleave(n, dim=0)
    response_mask = response_mask.to(pmask.dtype)
    prompt_pos = position_ids_from_mask(pmask)
    response_pos = prompt_pos[:, -1:] + torch.arange(1, R + 1, dtype=prompt_pos.dtype).unsqueeze(0)
    extra = {k: v for k, v in batch.tensors.items() if k not in GENERATED}
    repeated = Batch(extra, batch.non_tensors, batch.meta, batch_size=len(batch)).repeat(n)
    tensors = dict(repeated.tensors.items())
    tensors.update(
        prompts=prompts,
        responses=responses,
        input_ids=torch.cat([prompts, responses], dim=1),
        attention_mask=torch.cat([pmask, response_mask if response_attention_mask is None else response_attention_mask.to(pmask.dtype)], dim=1),
        position_ids=torch.cat([prompt_pos, response_pos], dim=1),
        response_mask=response_mask,
    )
    if log_probs is not None:
        tensors["rollout_log_probs"] = log_probs * response_mask
    return Batch(tensors, repeated.non_tensors, {**batch.meta, **(meta or {})}, batch_size=len(batch) * n)
