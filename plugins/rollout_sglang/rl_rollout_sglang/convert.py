"""Between rl-core batches and SGLang requests / answers: pure functions, no SGLang import.

Kept apart from :mod:`rl_rollout_sglang.engine` so the request building and
stop-string cut are tested without an engine. The engine-independent part
(prompt unpadding, length checks, samples -> rollout batch) is rl-core's
:mod:`rl_core.rollout.samples`, bound here to SGLang's names and limits.
"""

from __future__ import annotations

from typing import Any, Sequence

from rl_core.backends import SamplingParams
from rl_core.batch import Batch
from rl_core.rollout import samples
from rl_core.rollout.multi_turn import cut_at_stop  # shared with the multi-turn path; re-exported
from rl_core.rollout.samples import EMPTY_META_KEY, Sample, unpadded_prompts

__all__ = [
    "EMPTY_META_KEY",
    "PromptLengthError",
    "Sample",
    "build_rollout_batch",
    "check_prompt_lengths",
    "cut_at_stop",
    "parse_output",
    "request_seeds",
    "sampling_params",
    "unpadded_prompts",
]


class PromptLengthError(samples.PromptLengthError):
    """A prompt SGLang cannot generate from: empty, longer than ``data.max_prompt_length``,
    or too long for the engine's context length (the message names the sample and both lengths).

    A subclass of :class:`rl_core.rollout.samples.PromptLengthError`, so callers catch every backend's with one class.
    """


def check_prompt_lengths(prompts: Sequence[Sequence[int]], max_new_tokens: int, context_len: int, max_prompt_length: int | None) -> None:
    """Raise :class:`PromptLengthError` naming the first bad sample and the lengths involved."""
    samples.check_prompt_lengths(
        prompts,
        max_new_tokens,
        context_len,
        max_prompt_length,
        context_name="the SGLang engine's context length",
        context_key="rollout.engine_kwargs.context_length",
        error=PromptLengthError,
    )


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


def build_rollout_batch(batch: Batch, outputs: Sequence[Sample], params: SamplingParams, pad_id: int) -> Batch:
    """The output :meth:`RolloutEngine.generate` promises, from SGLang's samples (:func:`rl_core.rollout.samples.build_rollout_batch`)."""
    return samples.build_rollout_batch(batch, outputs, params, pad_id, engine="SGLang")
