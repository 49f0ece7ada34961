"""Small scorers the reward-manager tests register as cards (dotted paths, so pool workers import them)."""

from __future__ import annotations


def exact(*, data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """1.0 when the response equals the ground truth; reports what it was given."""
    hit = float(solution_str == ground_truth)
    return {"score": hit * kwargs.get("scale", 1.0), "hit": hit, "flag": True, "note": "text is not a metric"}


def length(*, data_source, solution_str, ground_truth, extra_info=None, response_length=None, **_):
    """Scores the token count the manager passes (response_length)."""
    return float(response_length)


def fixed_signature(data_source, solution_str, ground_truth, extra_info=None):
    """A verl-style function without **kwargs: must not be handed response_length."""
    return 0.25


def raises_on_odd(*, data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    if int(solution_str) % 2:
        raise ZeroDivisionError(f"odd response {solution_str}")
    return 1.0


def returns_text(**kwargs):
    return "high"


def returns_nan(**kwargs):
    return float("nan")


def batched(*, data_sources, solution_strs, ground_truths, extra_infos, **kwargs):
    """A batched card: one call for all samples."""
    return [{"score": float(s == g), "batch_size": float(len(solution_strs))} for s, g in zip(solution_strs, ground_truths)]


def text_length(*, data_source, solution_str, ground_truth, extra_info=None, **_):
    """Characters in the response, over 10."""
    return len(solution_str) / 10
