"""Structure rewards and the DAPO soft over-length penalty.

``score`` rewards a response for having the expected shape: by default
``<think>...</think>`` followed by ``<answer>...</answer>`` and nothing else
(the R1 / DAPO "think-answer" format), or any regular expression given as
``pattern``. Options (passed through ``reward.kwargs``):

=====================  ==========  =============================================
option                 default     meaning
=====================  ==========  =============================================
``pattern``            None        a regex; None uses the think / answer tags
``think_tag``          ``think``   tag names used when ``pattern`` is None
``answer_tag``         ``answer``
``match``              ``full``    ``full``: the whole (stripped) response must
                                   match; ``search``: a match anywhere
``format_score``       1.0         score for a matching response (0 otherwise)
``max_resp_len``       None        set to add the over-length penalty below
``overlong_buffer_len``  max/4  the soft-penalty zone (see :func:`overlong_penalty`)
``penalty_factor``     1.0
``length_unit``        ``tokens``  ``tokens``: needs ``response_length`` (the
                                   reward manager passes it from the batch's
                                   ``response_mask``); ``chars``: counts
                                   characters of the response
=====================  ==========  =============================================
"""

from __future__ import annotations

import functools
import re
from typing import Any

MATCH_MODES = ("full", "search")
LENGTH_UNITS = ("tokens", "chars")


def think_answer_pattern(think_tag: str = "think", answer_tag: str = "answer") -> str:
    """A regex for ``<think>..</think>`` then ``<answer>..</answer>`` (no nested tags)."""
    t, a = re.escape(think_tag), re.escape(answer_tag)
    return (
        rf"<{t}>(?:(?!</?{t}>).)*</{t}>\s*"
        rf"<{a}>(?:(?!</?{a}>).)*</{a}>"
    )


@functools.lru_cache(maxsize=64)
def _compile(pattern: str) -> re.Pattern:
    try:
        return re.compile(pattern, re.DOTALL)
    except re.error as exc:
        raise ValueError(f"format: pattern {pattern!r} is not a valid regular expression: {exc}") from None


def matches_format(
    solution_str: str,
    pattern: str | None = None,
    *,
    think_tag: str = "think",
    answer_tag: str = "answer",
    match: str = "full",
) -> bool:
    """Whether ``solution_str`` has the expected structure."""
    if match not in MATCH_MODES:
        raise ValueError(f"format: match={match!r} is not one of {MATCH_MODES}")
    regex = _compile(pattern if pattern is not None else think_answer_pattern(think_tag, answer_tag))
    text = (solution_str or "").strip()
    found = regex.fullmatch(text) if match == "full" else regex.search(text)
    return found is not None


def overlong_penalty(
    response_length: int,
    max_resp_len: int,
    overlong_buffer_len: int,
    penalty_factor: float = 1.0,
) -> float:
    """DAPO's soft over-length punishment, a value in ``[-penalty_factor, 0]``.

    Responses up to ``max_resp_len - overlong_buffer_len`` are not punished;
    inside the last ``overlong_buffer_len`` units the penalty grows linearly
    to ``-penalty_factor`` at ``max_resp_len``. DAPO (Yu et al. 2025, eq. 13)
    defines it only up to ``max_resp_len``; a longer response (an engine that
    does not truncate) is clamped at ``-penalty_factor`` here.

    Worked example: ``max_resp_len=100, overlong_buffer_len=20`` so the
    buffer starts at 80; a length of 90 is 10 into the buffer, giving
    ``-10 / 20 * 1.0 = -0.5``.
    """
    if max_resp_len <= 0:
        raise ValueError(f"overlong_penalty: max_resp_len must be positive, got {max_resp_len}")
    if not 0 < overlong_buffer_len <= max_resp_len:
        raise ValueError(
            f"overlong_penalty: overlong_buffer_len must be in (0, max_resp_len={max_resp_len}], got {overlong_buffer_len}"
        )
    expected = max_resp_len - overlong_buffer_len
    exceed = response_length - expected
    if exceed <= 0:
        return 0.0
    return -min(exceed / overlong_buffer_len, 1.0) * penalty_factor


def score(
    *,
    data_source: str | None = None,
    solution_str: str,
    ground_truth: Any = None,
    extra_info: dict | None = None,
    pattern: str | None = None,
    think_tag: str = "think",
    answer_tag: str = "answer",
    match: str = "full",
    format_score: float = 1.0,
    max_resp_len: int | None = None,
    overlong_buffer_len: int | None = None,
    penalty_factor: float = 1.0,
    length_unit: str = "tokens",
    response_length: int | None = None,
    **_: Any,
) -> dict:
    """``{"score", "format_ok"}`` plus ``"overlong_penalty"`` when ``max_resp_len`` is set."""
    ok = matches_format(solution_str, pattern, think_tag=think_tag, answer_tag=answer_tag, match=match)
    out = {"score": float(format_score) if ok else 0.0, "format_ok": 1.0 if ok else 0.0}
    if max_resp_len is not None:
        if length_unit not in LENGTH_UNITS:
            raise ValueError(f"format: length_unit={length_unit!r} is not one of {LENGTH_UNITS}")
        if length_unit == "chars":
            length = len(solution_str or "")
        elif response_length is None:
            raise ValueError(
                "format: the over-length penalty counts tokens but no response_length was given; "
                "score through the reward manager with a batch that has response_mask, "
                "or set length_unit='chars'"
            )
        else:
            length = int(response_length)
        buffer = overlong_buffer_len if overlong_buffer_len is not None else max(1, max_resp_len // 4)
        penalty = overlong_penalty(length, max_resp_len, buffer, penalty_factor)
        out["overlong_penalty"] = penalty
        out["score"] += penalty
    return out
