"""One prefill per GRPO group in the ``hf`` rollout, and the count that shows it (issue 48).

The ``n`` samples of a prompt share it: the hf rollout prefills each prompt row once and repeats its KV cache for
the samples (the plain loop's ``DynamicCache.batch_repeat_interleave``, the static decoder's cache writes). Each
``generate`` reports the prompt tokens it prefilled (padding not counted) as ``meta["rollout/prefill_tokens"]``:
``prompts x prompt length`` with sharing on, ``n`` times that with it off (summed over replicas by the loop).

``rollout.engine_kwargs.share_prefill=false`` turns sharing off (every sample prefills its own copy of the prompt:
the baseline the bench measures it against); models whose cache cannot be repeated (linear-attention layers)
always run that way. Sharing changes no token: the samples are drawn from the same logits by the same sampler,
in the same row order (tested in float32).
"""

from __future__ import annotations

from typing import Any

import torch

META_KEY = "rollout/prefill_tokens"


def enabled(engine_kwargs: dict[str, Any] | None) -> bool:
    """``rollout.engine_kwargs.share_prefill`` (default true)."""
    value = (engine_kwargs or {}).get("share_prefill", True)
    if not isinstance(value, bool):
        raise ValueError(f"rollout.engine_kwargs.share_prefill must be true or false, got {value!r}")
    return value


def expand(ids: torch.Tensor, mask: torch.Tensor, n: int, images: list | None = None):
    """``(ids, mask, images, 1)``: every prompt row repeated for its ``n`` samples (adjacent), to be prefilled each."""
    ids, mask = ids.repeat_interleave(n, dim=0), mask.repeat_interleave(n, dim=0)
    images = [d for d in images for _ in range(n)] if images is not None else None
    return ids, mask, images, 1


def prompt_tokens(mask: torch.Tensor) -> int:
    """Prompt tokens a prefill of these rows computes (padding excluded)."""
    return int(mask.sum())
