"""Between rl-core batches and vLLM requests: pure functions, no vLLM import.

Kept apart from :mod:`rl_rollout_vllm.engine` so the padding, masking and
bad-input rules are tested without an engine.
"""

from __future__ import annotations

import logging
from typing import Sequence

import attrs
import torch
from rl_core.backends import SamplingParams
from rl_core.batch import Batch
from rl_core.rollout.hf import PromptLengthError as _CorePromptLengthError
from rl_core.rollout.output import rollout_batch

log = logging.getLogger(__name__)

#: ``batch.meta`` key with the number of empty generations in the output.
EMPTY_META_KEY = "rollout/empty_responses"


class PromptLengthError(_CorePromptLengthError):
    """A prompt the engine cannot generate from: empty, longer than ``data.max_prompt_length``,
    or too long for the vLLM engine's max model length (the message names it).

    A subclass of the ``hf`` backend's error, so callers catch both with one class.
    """


@attrs.frozen
class Sample:
    """One finished sequence as vLLM returned it."""

    token_ids: tuple[int, ...] = attrs.field(converter=tuple)
    log_probs: tuple[float, ...] | None = attrs.field(default=None, converter=attrs.converters.optional(tuple))
    finish_reason: str | None = None


def unpadded_prompts(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> list[list[int]]:
    """Each row's real tokens (``attention_mask == 1``), left padding removed."""
    if input_ids.dim() != 2 or input_ids.shape != attention_mask.shape:
        raise ValueError(f"input_ids {tuple(input_ids.shape)} and attention_mask {tuple(attention_mask.shape)} must both be [B, P]")
    mask = attention_mask.bool().cpu()
    ids = input_ids.cpu()
    return [ids[i][mask[i]].tolist() for i in range(ids.shape[0])]


def check_prompt_lengths(
    prompts: Sequence[Sequence[int]], max_new_tokens: int, max_model_len: int, max_prompt_length: int | None = None
) -> None:
    """Raise naming the first bad sample when a prompt cannot be generated from.

    - longer than ``data.max_prompt_length`` (the run's contract, as the
      ``hf`` backend enforces it);
    - ``L + max_new_tokens > max_model_len``: vLLM rejects a prompt longer
      than its max model length outright and silently cuts a response short
      when only the sum is too long; both are reported here, with the numbers.
    """
    for i, p in enumerate(prompts):
        if len(p) == 0:
            raise PromptLengthError(f"prompt {i} of the batch is empty (its attention_mask has no 1s); every prompt needs at least one token")
    if max_prompt_length is not None:
        bad = [i for i, p in enumerate(prompts) if len(p) > max_prompt_length]
        if bad:
            i = bad[0]
            more = f" ({len(bad)} prompts of this batch are too long)" if len(bad) > 1 else ""
            raise PromptLengthError(
                f"prompt {i} of the batch has {len(prompts[i])} tokens, more than data.max_prompt_length={max_prompt_length}{more}; "
                "raise data.max_prompt_length or keep data.filter_overlong_prompts=true"
            )
    bad = [i for i, p in enumerate(prompts) if len(p) + max_new_tokens > max_model_len]
    if not bad:
        return
    i = bad[0]
    length = len(prompts[i])
    more = f" ({len(bad)} prompts of this batch are too long)" if len(bad) > 1 else ""
    if length >= max_model_len:
        what = f"prompt {i} of the batch has {length} tokens, longer than the vLLM engine's max model length {max_model_len}"
    else:
        what = (
            f"prompt {i} of the batch has {length} tokens; with max_new_tokens={max_new_tokens} it needs "
            f"{length + max_new_tokens} positions, more than the vLLM engine's max model length {max_model_len}"
        )
    raise PromptLengthError(
        f"{what}{more}; raise rollout.engine_kwargs.max_model_len (default: data.max_prompt_length + "
        "data.max_response_length) or lower max_new_tokens"
    )


def build_rollout_batch(batch: Batch, samples: Sequence[Sample], params: SamplingParams, pad_id: int) -> Batch:
    """The output :meth:`RolloutEngine.generate` promises, from vLLM's samples.

    ``samples`` holds ``len(batch) * params.n`` entries, the n samples of a
    prompt adjacent. Responses are right-padded with ``pad_id`` to exactly
    ``params.max_new_tokens``; ``response_mask`` is 1 on every returned token
    (vLLM includes the EOS / stop token and nothing after it).

    An empty generation (zero tokens) is not dropped, since that would break
    the ``B * n`` row contract: its row has an all-zero ``response_mask`` (it adds
    nothing to any loss), a warning names the sample, and
    ``meta["rollout/empty_responses"]`` counts such rows (0 when none).
    """
    n, R = params.n, params.max_new_tokens
    rows = len(batch) * n
    if len(samples) != rows:
        raise ValueError(f"vLLM returned {len(samples)} samples for {len(batch)} prompts x n={n} = {rows}")
    input_ids = batch.tensors["input_ids"].cpu()
    prompt_mask = batch.tensors["attention_mask"].cpu()
    responses = torch.full((rows, R), int(pad_id), dtype=input_ids.dtype)
    response_mask = torch.zeros((rows, R), dtype=prompt_mask.dtype)
    log_probs = torch.zeros((rows, R), dtype=torch.float32) if params.logprobs else None
    empty: list[int] = []
    for r, s in enumerate(samples):
        k = len(s.token_ids)
        if k > R:
            raise ValueError(f"sample {r} has {k} tokens, more than max_new_tokens={R}: the engine ignored max_tokens")
        if k == 0:
            empty.append(r)
            continue
        responses[r, :k] = torch.tensor(s.token_ids, dtype=input_ids.dtype)
        response_mask[r, :k] = 1
        if log_probs is not None:
            if s.log_probs is None or len(s.log_probs) != k:
                got = "none" if s.log_probs is None else len(s.log_probs)
                raise ValueError(f"sample {r} has {k} tokens but {got} log-probs")
            log_probs[r, :k] = torch.tensor(s.log_probs, dtype=torch.float32)
    if empty:
        shown = ", ".join(f"row {r} (prompt {r // n}, finish_reason={samples[r].finish_reason!r})" for r in empty[:5])
        log.warning(
            "vLLM returned %d empty generation(s) of %d: %s%s; they are kept with an all-zero response_mask (meta[%r])",
            len(empty), rows, shown, ", ..." if len(empty) > 5 else "", EMPTY_META_KEY,
        )

    return rollout_batch(batch, n, responses, response_mask, log_probs, meta={EMPTY_META_KEY: len(empty)})
