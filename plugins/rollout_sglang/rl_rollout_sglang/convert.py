"""Between rl-core batches and SGLang requests / answers: pure functions, no SGLang import.

Kept apart from :mod:`rl_rollout_sglang.engine` so the request building,
stop-string cut, padding and bad-input rules are tested without an engine.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Sequence

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
    """A prompt SGLang cannot generate from: empty, longer than ``data.max_prompt_length``,
    or too long for the engine's context length (the message names the sample and both lengths).

    A subclass of the ``hf`` backend's error, so callers catch every backend's with one class.
    """


@attrs.frozen
class Sample:
    """One finished sequence as SGLang returned it."""

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


def check_prompt_lengths(prompts: Sequence[Sequence[int]], max_new_tokens: int, context_len: int, max_prompt_length: int | None) -> None:
    """Raise :class:`PromptLengthError` naming the first bad sample and the lengths involved."""
    for i, p in enumerate(prompts):
        if not p:
            raise PromptLengthError(f"prompt {i} of the batch is empty (its attention_mask has no 1s); every prompt needs at least one token")
    if max_prompt_length is not None:
        over = [i for i, p in enumerate(prompts) if len(p) > max_prompt_length]
        if over:
            i = over[0]
            raise PromptLengthError(
                f"prompt {i} of the batch has {len(prompts[i])} tokens, more than data.max_prompt_length={max_prompt_length}"
                f"{_more(over)}; raise data.max_prompt_length or keep data.filter_overlong_prompts=true"
            )
    over = [i for i, p in enumerate(prompts) if len(p) + max_new_tokens > context_len]
    if over:
        i = over[0]
        n = len(prompts[i])
        raise PromptLengthError(
            f"prompt {i} of the batch has {n} tokens; with max_new_tokens={max_new_tokens} it needs {n + max_new_tokens} "
            f"positions, more than the SGLang engine's context length {context_len}{_more(over)}; raise "
            "rollout.engine_kwargs.context_length (default: data.max_prompt_length + data.max_response_length) or lower max_new_tokens"
        )


def _more(bad: list[int]) -> str:
    return f" ({len(bad)} prompts of this batch are too long)" if len(bad) > 1 else ""


def sampling_params(params: SamplingParams, seed: int | None) -> dict[str, Any]:
    """SGLang's per-request sampling parameters for one sample of ``params``.

    Greedy (``greedy`` or temperature 0) is temperature 0, which SGLang decodes
    with argmax and reports ``log_softmax(logits)`` for (temperature 1, as the
    trainer does for greedy). Stop strings are not sent: the adapter cuts
    responses itself (:func:`cut_at_stop`), since the engine runs without a tokenizer.
    """
    greedy = params.greedy or params.temperature <= 0
    out: dict[str, Any] = {"max_new_tokens": int(params.max_new_tokens)}
    if greedy:
        out["temperature"] = 0.0
    else:
        out.update(temperature=float(params.temperature), top_p=float(params.top_p))
        if params.top_k > 0:
            out["top_k"] = int(params.top_k)
        if seed is not None:
            out["sampling_seed"] = int(seed)
    return out


def request_seeds(num_prompts: int, n: int, seed: int | None) -> list[int | None]:
    """One seed per sample: sample ``j`` of prompt ``i`` gets ``seed + i * n + j`` (None: unseeded)."""
    if seed is None:
        return [None] * (num_prompts * n)
    return [int(seed) + k for k in range(num_prompts * n)]


def parse_output(out: dict[str, Any], want_log_probs: bool) -> Sample:
    """A :class:`Sample` from one SGLang answer (``output_ids`` and ``meta_info``)."""
    meta = out.get("meta_info") or {}
    entries = meta.get("output_token_logprobs")
    ids = out.get("output_ids")
    if ids is None and entries is not None:  # a server started with a tokenizer answers text; ids ride in the log-probs
        ids = [int(e[1]) for e in entries]
    if ids is None:
        raise RuntimeError(f"SGLang returned no output token ids (keys: {sorted(out)}, meta_info keys: {sorted(meta)})")
    lps = None
    if want_log_probs:
        if entries is None:
            raise RuntimeError("SGLang returned no output_token_logprobs although return_logprob=True was sent")
        lps = [float(e[0]) for e in entries]
    finish = meta.get("finish_reason")
    reason = finish.get("type") if isinstance(finish, dict) else finish
    return Sample(ids, lps, reason)


def cut_at_stop(sample: Sample, stop: Sequence[str], decode: Callable[[list[int]], str]) -> Sample:
    """``sample`` ending with the token that completes the first stop string (unchanged when none occurs).

    The kept tokens include the one that completes the stop string, as the
    rollout contract asks; log-probs are cut alike.
    """
    if not stop or not sample.token_ids:
        return sample
    ids = list(sample.token_ids)
    if not any(s in decode(ids) for s in stop):
        return sample
    for k in range(1, len(ids) + 1):
        if any(s in decode(ids[:k]) for s in stop):
            lps = None if sample.log_probs is None else sample.log_probs[:k]
            return Sample(ids[:k], lps, "stop")
    return sample


def build_rollout_batch(batch: Batch, samples: Sequence[Sample], params: SamplingParams, pad_id: int) -> Batch:
    """The output :meth:`RolloutEngine.generate` promises, from SGLang's samples.

    ``samples`` holds ``len(batch) * params.n`` entries, the n samples of a
    prompt adjacent. An empty generation (zero tokens) is kept, since dropping it
    would break the ``B * n`` row contract: its row has an all-zero
    ``response_mask`` (it adds nothing to any loss), a warning names the row and
    ``meta["rollout/empty_responses"]`` counts such rows (0 when none).
    """
    n, R = params.n, params.max_new_tokens
    rows = len(batch) * n
    if len(samples) != rows:
        raise ValueError(f"SGLang returned {len(samples)} samples for {len(batch)} prompts x n={n} = {rows}")
    dtype = batch.tensors["input_ids"].dtype
    responses = torch.full((rows, R), int(pad_id), dtype=dtype)
    response_mask = torch.zeros((rows, R), dtype=batch.tensors["attention_mask"].dtype)
    log_probs = torch.zeros((rows, R), dtype=torch.float32) if params.logprobs else None
    empty = []
    for r, s in enumerate(samples):
        k = len(s.token_ids)
        if k > R:
            raise ValueError(f"sample {r} has {k} tokens, more than max_new_tokens={R}: the engine ignored max_new_tokens")
        if k == 0:
            empty.append(r)
            continue
        responses[r, :k] = torch.tensor(s.token_ids, dtype=dtype)
        response_mask[r, :k] = 1
        if log_probs is not None:
            if s.log_probs is None or len(s.log_probs) != k:
                raise ValueError(f"sample {r} has {k} tokens but {'no' if s.log_probs is None else len(s.log_probs)} log-probs")
            log_probs[r, :k] = torch.tensor(s.log_probs, dtype=torch.float32)
    if empty:
        shown = ", ".join(f"row {r} (prompt {r // n}, finish_reason={samples[r].finish_reason!r})" for r in empty[:5])
        log.warning(
            "SGLang returned %d empty generation(s) of %d: %s%s; kept with an all-zero response_mask (meta[%r])",
            len(empty), rows, shown, ", ..." if len(empty) > 5 else "", EMPTY_META_KEY,
        )
    return rollout_batch(batch, n, responses, response_mask, log_probs, meta={EMPTY_META_KEY: len(empty)})
