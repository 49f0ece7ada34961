"""gsm8k reward: the real GSM8K test set end to end, and the number normalisation by hand."""

from __future__ import annotations

import json
import re
from decimal import Decimal
from pathlib import Path

import pytest
from rl_reward_rule import gsm8k

REPO = Path(__file__).resolve().parents[3]
GSM8K_TEST = REPO.parent / "shared" / "data" / "gsm8k" / "test.jsonl"


@pytest.fixture(scope="module")
def gsm8k_test_rows() -> list[dict]:
    if not GSM8K_TEST.is_file():
        pytest.skip(f"needs {GSM8K_TEST} (the shared GSM8K copy on the project's machines, not in a clone)")
    rows = [json.loads(line) for line in GSM8K_TEST.read_text().splitlines() if line.strip()]
    assert len(rows) == 1319
    return rows


def _reference_number(solution: str) -> str:
    # The text after the last "####", as written (may hold "1,600" or "-10").
    return solution.rsplit("####", 1)[1].strip()


def _with_final_number(solution: str, number: str) -> str:
    head, _ = solution.rsplit("####", 1)
    return f"{head}#### {number}"


@pytest.mark.parametrize("method", ["strict", "flexible"])
def test_every_reference_solution_scores_one_and_a_changed_number_zero(gsm8k_test_rows, method):
    right = wrong = 0
    for row in gsm8k_test_rows:
        truth = _reference_number(row["answer"])
        got = gsm8k.score(data_source="openai/gsm8k", solution_str=row["answer"], ground_truth=truth, method=method)
        right += got["score"] == 1.0
        changed = str(Decimal(truth.replace(",", "")) + 1)
        bad = gsm8k.score(
            data_source="openai/gsm8k",
            solution_str=_with_final_number(row["answer"], changed),
            ground_truth=truth,
            method=method,
        )
        wrong += bad["score"] == 0.0 and bad["acc"] == 0.0
    assert right == len(gsm8k_test_rows)
    assert wrong == len(gsm8k_test_rows)


def test_strict_needs_the_marker_flexible_takes_the_last_number():
    text = "She has 3 apples and buys 15 more, so 18 in total."
    assert gsm8k.score(solution_str=text, ground_truth="18", method="strict")["score"] == 0.0
    assert gsm8k.score(solution_str=text, ground_truth="18", method="flexible")["score"] == 1.0
    # strict takes the *last* marker
    assert gsm8k.score(solution_str="#### 5\nwait, no\n#### 18", ground_truth="18")["score"] == 1.0


@pytest.mark.parametrize(
    "response, truth, expected",
    [
        ("#### 1,200", "1200", 1.0),  # thousands separators
        ("#### 1200", "1,200", 1.0),  # ... on either side
        ("#### 1,234,567", "1234567", 1.0),
        ("#### $18", "18", 1.0),  # dollar sign
        ("#### $ 18", "18", 1.0),
        ("#### 18.", "18", 1.0),  # trailing period
        ("#### 18.0", "18", 1.0),  # trailing .0
        ("#### 18.00", "18", 1.0),
        ("#### 18", "18.00", 1.0),
        ("#### -5", "-5", 1.0),  # negative
        ("#### $-5", "-5", 1.0),
        ("#### -$5", "-5", 1.0),
        ("#### \u22125", "-5", 1.0),  # Unicode minus
        ("#### 5", "-5", 0.0),
        ("#### -5", "5", 0.0),
        ("#### 0.5", "0.50", 1.0),
        ("#### .5", "0.5", 1.0),
        ("#### 18.5", "18", 0.0),
        ("#### 180", "18", 0.0),
        ("#### 18 dollars", "18", 1.0),
        ("####18", "18", 1.0),
        ("#### $1,200.00.", "1200", 1.0),
        ("#### forty", "40", 0.0),  # no number after the marker
        ("", "40", 0.0),
    ],
)
def test_strict_number_normalisation(response, truth, expected):
    assert gsm8k.score(solution_str=response, ground_truth=truth, method="strict")["score"] == expected


@pytest.mark.parametrize(
    "response, expected_pred",
    [
        ("so 3 + 4 = 7", "7"),
        ("the total is $1,250.", "$1,250"),
        ("it drops to -3 degrees", "-3"),
        ("rates 3,4 and 5", "5"),  # "3,4" is not a thousands-separated number
        ("no digits here", None),
    ],
)
def test_flexible_extraction(response, expected_pred):
    assert gsm8k.extract_answer(response, "flexible") == expected_pred


def test_score_fields_and_options():
    out = gsm8k.score(solution_str="#### 7", ground_truth="8", format_score=0.1)
    assert out == {"score": 0.1, "acc": 0.0, "has_answer": 1.0, "pred": "7"}
    out = gsm8k.score(solution_str="nothing", ground_truth="8", format_score=0.1)
    assert out["score"] == 0.0 and out["has_answer"] == 0.0
    assert gsm8k.score(solution_str="#### 8", ground_truth=8)["score"] == 1.0  # numeric ground truth


def test_bad_method_and_bad_ground_truth_raise():
    with pytest.raises(ValueError, match="method='loose'"):
        gsm8k.score(solution_str="#### 1", ground_truth="1", method="loose")
    with pytest.raises(ValueError, match="ground_truth 'abc' is not a number"):
        gsm8k.score(solution_str="#### 1", ground_truth="abc")


def test_long_responses_stay_fast():
    # a pathological-looking response must not blow up the regex
    text = "1," * 50_000 + " #### 12"
    assert gsm8k.score(solution_str=text, ground_truth="12")["score"] == 1.0
    assert re.compile(gsm8k._NUMBER).pattern  # the pattern compiles on its own
