"""format reward: structure matching and the DAPO over-length penalty (values worked by hand)."""

from __future__ import annotations

import pytest
from rl_reward_rule.format_reward import matches_format, overlong_penalty, score

GOOD = "<think>15 + 3 = 18</think>\n<answer>18</answer>"


@pytest.mark.parametrize(
    "text, ok",
    [
        (GOOD, True),
        ("  " + GOOD + "\n", True),  # surrounding whitespace is ignored
        ("<think>a\nb</think><answer>c</answer>", True),  # multi-line, no gap
        ("<answer>18</answer>", False),  # no think block
        ("<think>x</think>", False),  # no answer block
        ("<answer>18</answer><think>x</think>", False),  # wrong order
        (GOOD + " and more text", False),  # trailing text (full match)
        ("<think>a<think>b</think></think><answer>c</answer>", False),  # nested tags
        ("<think>x</think><answer>1</answer><answer>2</answer>", False),  # two answers
        ("", False),
    ],
)
def test_think_answer_format(text, ok):
    assert matches_format(text) is ok
    assert score(solution_str=text)["score"] == (1.0 if ok else 0.0)


def test_search_mode_custom_tags_and_custom_pattern():
    text = "Sure! " + GOOD
    assert not matches_format(text)
    assert matches_format(text, match="search")
    assert matches_format("<reasoning>r</reasoning><final>f</final>", think_tag="reasoning", answer_tag="final")
    assert score(solution_str="Final answer: 42", pattern=r"Final answer: -?\d+", format_score=0.5)["score"] == 0.5
    assert score(solution_str="Final answer: x", pattern=r"Final answer: -?\d+")["score"] == 0.0


def test_bad_options_raise():
    with pytest.raises(ValueError, match="not a valid regular expression"):
        score(solution_str="x", pattern="(unclosed")
    with pytest.raises(ValueError, match="match='exact'"):
        score(solution_str="x", match="exact")


@pytest.mark.parametrize(
    "length, expected",
    [
        # max_resp_len=100, buffer 20: no penalty up to 80, then -1/20 per token.
        (0, 0.0),
        (80, 0.0),
        (81, -0.05),  # 1 into the buffer: -1/20
        (90, -0.5),  # 10 into the buffer: -10/20
        (100, -1.0),  # at the limit: the full factor
        (130, -1.0),  # past the limit: clamped
    ],
)
def test_overlong_penalty_values(length, expected):
    assert overlong_penalty(length, 100, 20, 1.0) == pytest.approx(expected)


def test_overlong_penalty_factor_and_validation():
    assert overlong_penalty(90, 100, 20, 0.5) == pytest.approx(-0.25)
    with pytest.raises(ValueError, match="overlong_buffer_len"):
        overlong_penalty(10, 100, 0)
    with pytest.raises(ValueError, match="overlong_buffer_len"):
        overlong_penalty(10, 100, 101)
    with pytest.raises(ValueError, match="max_resp_len"):
        overlong_penalty(10, 0, 1)


def test_penalty_added_to_the_format_score():
    out = score(solution_str=GOOD, max_resp_len=100, overlong_buffer_len=20, response_length=90)
    # format 1.0 + penalty -0.5
    assert out == {"score": pytest.approx(0.5), "format_ok": 1.0, "overlong_penalty": pytest.approx(-0.5)}
    out = score(solution_str="bad", max_resp_len=100, overlong_buffer_len=20, response_length=50)
    assert out["score"] == 0.0 and out["overlong_penalty"] == 0.0
    # characters instead of tokens: GOOD is 46 characters; max 51 with a 10-char buffer
    # starts the buffer at 41, so 46 is 5 into it -> -5/10
    assert len(GOOD) == 46
    out = score(solution_str=GOOD, max_resp_len=51, overlong_buffer_len=10, length_unit="chars")
    assert out["overlong_penalty"] == pytest.approx(-0.5)


def test_token_penalty_without_a_length_says_how_to_fix_it():
    with pytest.raises(ValueError, match="response_length"):
        score(solution_str=GOOD, max_resp_len=100)
