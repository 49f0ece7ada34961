"""From an engine's finished sequences to the rollout output, the same for every rollout plugin: the prompts' real
ids (:func:`unpadded_prompts`), their length checks (:func:`check_prompt_lengths`), and :class:`Sample` s -> the batch
:meth:`RolloutEngine.generate` promises (:func:`build_rollout_batch`).
"""

from __future__ import annotations

import logging
from typing import Sequence

import attrs
import torch

from rl_core.backends import SamplingParams
from rl_core.batch import Batch
from rl_core.problems import UserError
from rl_core.rollout.output import rollout_batch

log = logging.getLogger(__name__)


class PromptLengthError(UserError, ValueError):
    """A prompt an engine cannot generate from: empty, longer than ``data.max_prompt_length``, or too long for the
    engine's context (the message names the sample, the lengths and the key). Engines' own errors subclass it, so
    callers catch every backend's with one class."""


#: ``batch.meta`` key with the number of empty generations in the output.
EMPTY_META_KEY = "rollout/empty_responses"


@attrs.frozen
class Sample:
    """One finished sequence as an engine returned it."""

    token_ids: tuple[int, ...] = attrs.field(converter=tuple)
    log_probs: tuple[float, ...] | None = attrs.field(default=None, converter=attrs.converters.optional(tuple))
    finish_reason: str | None = None


def unpadded_prompts(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> list[list[int]]:
    """Each row's real tokens (``attention_mask == 1``), left padding removed."""
    if input_ids.dim() != 2 or input_ids.shape != attention_mask.shape:
        raise ValueError(f"input_ids {tuple(input_ids.shape)} and attention_mask {tuple(attention_mask.shape)} must both be [B, P]")
    keep = attention_mask.bool().cpu()
    ids = input_ids.cpu()
    return [ids[i][keep[i]].tolist() for i in range(ids.shape[0])]


def _more(bad: list[int]) -> str:
    return f" ({len(bad)} prompts of this batch are too long)" if len(bad) > 1 else ""


def check_prompt_lengths(
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    context_len: int,
    max_prompt_length: int | None = None,
    *,
    context_name: str = "the engine's context length",
    context_key: str = "rollout.engine_kwargs.max_model_len",
    error: type[PromptLengthError] = PromptLengthError,
) -> None:
    """Raise ``error`` naming the first prompt that is empty, longer than ``max_prompt_length``, or with
    ``L + max_new_tokens > context_len`` (engines reject the first and may silently cut a response short on the
    second), with the numbers and ``context_key``, the setting that raises the limit."""
    for i, p in enumerate(prompts):
        if len(p) == 0:
            raise error(f"prompt {i} of the batch is empty (its attention_mask has no 1s); every prompt needs at least one token")
    if max_prompt_length is not None:
        over = [i for i, p in enumerate(prompts) if len(p) > max_prompt_length]
        if over:
            i = over[0]
            raise error(
                f"prompt {i} of the batch has {len(prompts[i])} tokens, more than data.max_prompt_length={max_prompt_length}"
                f"{_more(over)}; raise data.max_prompt_length or keep data.filter_overlong_prompts=true"
            )
    over = [i for i, p in enumerate(prompts) if len(p) + max_new_tokens > context_len]
    if not over:
        return
    i = over[0]
    length = len(prompts[i])
    if length >= context_len:
        what = f"prompt {i} of the batch has {length} tokens, longer than {context_name} {context_len}"
    else:
        what = (
            f"prompt {i} of the batch has {length} tokens; with max_new_tokens={max_new_tokens} it needs "
            f"{length + max_new_tokens} positions, more than {context_name} {context_len}"
        )
    raise error(
        f"{what}{_more(over)}; raise {context_key} (default: data.max_prompt_length + data.max_response_length) or lower max_new_tokens"
    )


def build_rollout_batch(batch: Batch, samples: Sequence[Sample], params: SamplingParams, pad_id: int, engine: str = "the engine") -> Batch:
    """The output :meth:`RolloutEngine.generate` promises, from ``len(batch) * params.n`` samples (a prompt's n
    adjacent, each with the EOS / stop token and nothing after it): responses right-padded to ``max_new_tokens``.

    An empty generation is kept (the ``B * n`` row contract) with an all-zero ``response_mask``, a warning and
    ``meta[EMPTY_META_KEY]`` counting such rows. ``engine`` names the engine in messages.
    """
    n, R = params.n, params.max_new_tokens
    rows = len(batch) * n
    if len(samples) != rows:
        raise ValueError(f"{engine} returned {len(samples)} samples for {len(batch)} prompts x n={n} = {rows}")
    dtype = batch.tensors["input_ids"].dtype
    responses = torch.full((rows, R), int(pad_id), dtype=dtype)
    response_mask = torch.zeros((rows, R), dtype=batch.tensors["attention_mask"].dtype)
    log_probs = torch.zeros((rows, R), dtype=torch.float32) if params.logprobs else None
    empty: list[int] = []
    for r, s in enumerate(samples):
        k = len(s.token_ids)
        if k > R:
            raise ValueError(f"sample {r} has {k} tokens, more than max_new_tokens={R}: {engine} ignored the token limit")
        if k == 0:
            empty.append(r)
            continue
        responses[r, :k] = torch.tensor(s.token_ids, dtype=dtype)
        response_mask[r, :k] = 1
        if log_probs is not None:
            if s.log_probs is None or len(s.log_probs) != k:
                got = "no" if s.log_probs is None else len(s.log_probs)
                raise ValueError(f"sample {r} has {k} tokens but {got} log-probs")
            log_probs[r, :k] = torch.tensor(s.log_probs, dtype=torch.float32)
    if empty:
        shown = ", ".join(f"row {r} (prompt {r // n}, finish_reason={samples[r].finish_reason!r})" for r in empty[:5])
        log.warning("%s returned %d empty generation(s) of %d: %s%s; they are kept with an all-zero response_mask (meta[%r])",
                    engine, len(empty), rows, shown, ", ..." if len(empty) > 5 else "", EMPTY_META_KEY)
    return rollout_batch(batch, n, responses, response_mask, log_probs, meta={EMPTY_META_KEY: len(empty)})
