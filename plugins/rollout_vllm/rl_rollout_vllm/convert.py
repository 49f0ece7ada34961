"""Between rl-core batches and vLLM requests: pure functions, no vLLM import.

The engine-independent part (prompt unpadding, length checks, samples ->
rollout batch) is rl-core's :mod:`rl_core.rollout.samples`; this module
binds it to vLLM's names and limits, so messages name vLLM's settings.
"""

from __future__ import annotations

from typing import Sequence

from rl_core.backends import SamplingParams
from rl_core.batch import Batch
from rl_core.rollout import samples
from rl_core.rollout.samples import EMPTY_META_KEY, Sample, unpadded_prompts

__all__ = ["EMPTY_META_KEY", "PromptLengthError", "Sample", "build_rollout_batch", "check_prompt_lengths", "unpadded_prompts"]


class PromptLengthError(samples.PromptLengthError):
    """A prompt the engine cannot generate from: empty, longer than ``data.max_prompt_length``,
    or too long for the vLLM engine's max model length (the message names it).

    A subclass of :class:`rl_core.rollout.samples.PromptLengthError`, so callers catch every backend's with one class.
    """


def check_prompt_lengths(
    prompts: Sequence[Sequence[int]], max_new_tokens: int, max_model_len: int, max_prompt_length: int | None = None
) -> None:
    """Raise :class:`PromptLengthError` naming the first bad sample (:func:`rl_core.rollout.samples.check_prompt_lengths`).

    vLLM rejects a prompt longer than its max model length outright and
    silently cuts a response short when only the sum is too long; both are
    reported here, with the numbers.
    """
    samples.check_prompt_lengths(
        prompts,
        max_new_tokens,
        max_model_len,
        max_prompt_length,
        context_name="the vLLM engine's max model length",
        context_key="rollout.engine_kwargs.max_model_len",
        error=PromptLengthError,
    )


def build_rollout_batch(batch: Batch, outputs: Sequence[Sample], params: SamplingParams, pad_id: int) -> Batch:
    """The output :meth:`RolloutEngine.generate` promises, from vLLM's samples (:func:`rl_core.rollout.samples.build_rollout_batch`)."""
    return samples.build_rollout_batch(batch, outputs, params, pad_id, engine="vLLM")
