"""MATH-style final answers: symbolic equivalence with the ``math-verify`` package.

The ground truth is the reference answer (``"\\frac{1}{2}"``, ``"(0, 3]"``,
``"10\\text{ cm}"``, with or without ``\\boxed{}``); the response is free text
whose final answer is found by math-verify (``\\boxed{...}`` first, then
LaTeX / plain expressions). math-verify compares the two as sympy objects:
``0.5`` equals ``\\frac12``, ``\\{1,2\\}`` equals ``\\{2,1\\}``, units in
``\\text{}`` are dropped, intervals keep their open / closed ends.

math-verify times out slow parses and comparisons with ``signal.alarm``,
which works only on a process's main thread. Off the main thread the
timeouts are switched off; the reward manager's per-sample timeout
(``reward.num_workers > 0``) is the guard that always applies.
"""

from __future__ import annotations

import threading
from typing import Any

from rl_reward_rule import latex_runtime


def _timeouts_allowed() -> bool:
    return threading.current_thread() is threading.main_thread()


def _boxed(answer: str) -> str:
    return answer if "\\boxed" in answer else "\\boxed{" + answer + "}"


def parse_gold(ground_truth: Any, timeout_s: int | None = 5) -> list:
    """Parse a reference answer (boxed or bare LaTeX)."""
    from math_verify import LatexExtractionConfig, parse

    latex_runtime.ensure()

    gold = str(ground_truth).strip()
    if gold.startswith("$") and gold.endswith("$") and len(gold) > 1:
        gold = gold.strip("$")
    return parse(_boxed(gold), extraction_config=[LatexExtractionConfig()], parsing_timeout=timeout_s)


def parse_pred(solution_str: str, timeout_s: int | None = 5) -> list:
    """Parse a model response: a boxed answer first, then any LaTeX or plain expression."""
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse

    latex_runtime.ensure()

    return parse(
        solution_str,
        extraction_config=[LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()],
        parsing_timeout=timeout_s,
    )


def is_equivalent(pred: str, gold: Any, *, timeout_s: int | None = 5) -> bool:
    """Whether the final answer in ``pred`` equals the reference ``gold``."""
    from math_verify import verify

    if not _timeouts_allowed():
        timeout_s = None
    gold_parsed = parse_gold(gold, timeout_s)
    if not gold_parsed:
        raise ValueError(f"math: could not parse the ground truth {str(gold)[:200]!r}")
    pred_parsed = parse_pred(pred, timeout_s)
    if not pred_parsed:
        return False
    return bool(verify(gold_parsed, pred_parsed, timeout_seconds=timeout_s))


def score(
    *,
    data_source: str | None = None,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict | None = None,
    correct_score: float = 1.0,
    incorrect_score: float = 0.0,
    timeout_s: int | None = 5,
    **_: Any,
) -> dict:
    """Score one MATH-style response: ``{"score", "acc"}``.

    A math-verify timeout on this sample counts as incorrect (it is not
    raised); a ground truth math-verify cannot parse raises ``ValueError``
    so the data problem is seen rather than scored 0 forever.
    """
    from math_verify.errors import TimeoutException

    try:
        correct = is_equivalent(solution_str or "", ground_truth, timeout_s=timeout_s)
    except TimeoutException:
        correct = False
    return {"score": float(correct_score if correct else incorrect_score), "acc": 1.0 if correct else 0.0}
