"""GSM8K: compare the response's final number with the reference number.

Two extractors, picked with ``method``:

- ``"strict"``: the number after the last ``####`` marker (the format GSM8K's
  reference solutions use, and the one our prompts ask for). A response
  without the marker scores 0 however right its arithmetic is.
- ``"flexible"``: the last number anywhere in the response.

Numbers are compared by value, not by text: thousands separators, a ``$``
sign, a trailing period, Unicode minus and trailing zeros after the decimal
point are ignored, so ``"#### $1,200.00."`` equals the ground truth
``"1200"``. (verl compares the extracted strings after dropping ``,`` and
``$``, so ``"18.0"`` does not match ``"18"`` there; it does here.)
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any

METHODS = ("strict", "flexible")

# An optionally signed number, possibly with a "$" and thousands separators.
# Separators must come in groups of three ("1,234,567"), so "3,4" reads as two
# numbers. A lone trailing "." is not part of the number ("18." -> "18").
_NUMBER = r"[-\u2212]?(?:\$\s?)?[-\u2212]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|[-\u2212]?\$?\.\d+"
_NUMBER_RE = re.compile(_NUMBER)
_STRICT_RE = re.compile(r"####\s*(" + _NUMBER + ")")


def normalize_number(text: Any) -> Decimal | None:
    """The value of a GSM8K-style number string, or None if it is not one.

    >>> normalize_number("$1,200.00.") == 1200
    True
    >>> normalize_number("12 apples") is None
    True
    """
    if text is None:
        return None
    if isinstance(text, (int, float, Decimal)) and not isinstance(text, bool):
        value = Decimal(str(text))
    else:
        s = str(text).strip().rstrip(".").replace("\u2212", "-")
        s = s.replace(",", "").replace("$", "").replace(" ", "")
        negative = s.count("-") == 1 and s.startswith("-")
        s = s.lstrip("-") if negative else s
        if not re.fullmatch(r"\d+(?:\.\d*)?|\.\d+", s):
            return None
        try:
            value = Decimal(s)
        except InvalidOperation:  # pragma: no cover - the regex guards this
            return None
        if negative:
            value = -value
    if not value.is_finite():
        return None
    # 18.00 -> 18, -0 -> 0
    return value.normalize() + Decimal(0)


def extract_answer(solution_str: str, method: str = "strict") -> str | None:
    """The final-answer text the chosen extractor finds in ``solution_str`` (None if none)."""
    if method not in METHODS:
        raise ValueError(f"gsm8k: method={method!r} is not one of {METHODS}")
    if method == "strict":
        found = _STRICT_RE.findall(solution_str)
    else:
        found = _NUMBER_RE.findall(solution_str)
    return found[-1].strip() if found else None


def score(
    *,
    data_source: str | None = None,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict | None = None,
    method: str = "strict",
    correct_score: float = 1.0,
    format_score: float = 0.0,
    **_: Any,
) -> dict:
    """Score one GSM8K response.

    Returns ``{"score", "acc", "has_answer", "pred"}``: ``score`` is
    ``correct_score`` when the extracted number equals ``ground_truth``,
    ``format_score`` when a number was extracted but is wrong, else 0;
    ``acc`` is 1.0 / 0.0 for correctness alone.
    """
    pred = extract_answer(solution_str or "", method)
    gold = normalize_number(ground_truth)
    if gold is None:
        raise ValueError(f"gsm8k: ground_truth {ground_truth!r} is not a number")
    if pred is None:
        return {"score": 0.0, "acc": 0.0, "has_answer": 0.0, "pred": None}
    value = normalize_number(pred)
    correct = value is not None and value == gold
    return {
        "score": float(correct_score if correct else format_score),
        "acc": 1.0 if correct else 0.0,
        "has_answer": 1.0,
        "pred": pred,
    }
