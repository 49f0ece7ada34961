"""math reward: a hand-written table of equivalent / non-equivalent final answers."""

from __future__ import annotations

import threading

import pytest

pytest.importorskip("math_verify", reason="the math reward needs the math-verify package")

from rl_reward_rule import math_answer  # noqa: E402

# (response, ground truth, equivalent?) -- each decided by hand, not by running the scorer.
TABLE = [
    # fractions and decimals
    (r"The answer is $\boxed{\frac{1}{2}}$.", r"\frac{1}{2}", True),
    (r"\boxed{0.5}", r"\frac12", True),
    (r"\boxed{\dfrac{3}{4}}", r"\frac{3}{4}", True),
    (r"\boxed{\frac{2}{4}}", r"\frac{1}{2}", True),
    (r"\boxed{1/2}", r"\frac{1}{2}", True),
    (r"\boxed{-\frac{1}{2}}", "-0.5", True),
    (r"\boxed{\frac{-1}{2}}", r"-\frac{1}{2}", True),
    (r"\boxed{\frac{1}{3}}", "0.333", False),
    (r"\boxed{\frac{1}{2}}", r"\frac{1}{3}", False),
    (r"\boxed{-\frac{1}{2}}", r"\frac{1}{2}", False),
    # LaTeX forms of the same number / expression
    (r"\boxed{2\sqrt{2}}", r"\sqrt{8}", True),
    (r"\boxed{\sqrt{3}/2}", r"\frac{\sqrt{3}}{2}", True),
    (r"\boxed{x^2+2x+1}", "(x+1)^2", True),
    (r"\boxed{x=3}", "3", True),
    (r"\boxed{1,000}", "1000", True),
    (r"\boxed{3}", "$3$", True),
    (r"\boxed{5}", r"\boxed{5}", True),
    (r"\boxed{\pi}", "3.14", False),
    (r"\boxed{2\sqrt{3}}", r"\sqrt{6}", False),
    (r"\boxed{x^2-1}", "(x+1)^2", False),
    (r"\boxed{7}", "8", False),
    # units, percent, degrees, money
    (r"\boxed{10\text{ cm}}", "10", True),
    (r"\boxed{10}", r"10\text{ cm}", True),
    (r"\boxed{10 \text{ inches}}", "10", True),
    (r"\boxed{12\text{ cm}^2}", "12", True),
    # percent and Gamma: the 4.9.3 antlr parser (hydra / OmegaConf pin antlr 4.9) needs rl_reward_rule.latex_runtime
    (r"\boxed{50\%}", "50", True),
    (r"\boxed{50\%}", "0.5", True),
    (r"\boxed{\Gamma(5)}", "24", True),
    (r"\boxed{90^\circ}", "90", True),
    (r"\boxed{\$5}", "5", True),
    (r"\boxed{11\text{ cm}}", "10", False),
    # intervals and sets
    (r"\boxed{(0,3]}", "(0,3]", True),
    (r"\boxed{(-\infty, 2)}", r"(-\infty,2)", True),
    (r"\boxed{x \in [1, 5]}", "[1,5]", True),
    (r"\boxed{\{1,2\}}", r"\{2,1\}", True),
    (r"\boxed{[0,3]}", "(0,3]", False),
    (r"\boxed{(0,3)}", "(0,3]", False),
    (r"\boxed{(-\infty, 2]}", r"(-\infty,2)", False),
    (r"\boxed{\{1,3\}}", r"\{1,2\}", False),
    # matrices, choices, and responses without an answer
    (r"\boxed{\begin{pmatrix}1\\2\end{pmatrix}}", r"\begin{pmatrix}1\\2\end{pmatrix}", True),
    (r"\boxed{\begin{pmatrix}2\\1\end{pmatrix}}", r"\begin{pmatrix}1\\2\end{pmatrix}", False),
    (r"\boxed{\text{(B)}}", r"\text{(B)}", True),
    ("I am not sure.", "5", False),
]


def test_the_table_is_big_enough():
    assert len(TABLE) >= 30
    rows = [getattr(row, "values", row) for row in TABLE]
    assert sum(eq for *_, eq in rows) >= 10 and sum(not eq for *_, eq in rows) >= 10


@pytest.mark.parametrize("response, truth, equivalent", TABLE)
def test_math_equivalence(response, truth, equivalent):
    out = math_answer.score(data_source="lighteval/MATH", solution_str=response, ground_truth=truth)
    assert out["score"] == (1.0 if equivalent else 0.0)
    assert out["acc"] == (1.0 if equivalent else 0.0)


def test_scores_are_configurable():
    out = math_answer.score(solution_str=r"\boxed{2}", ground_truth="3", correct_score=1.0, incorrect_score=-1.0)
    assert out["score"] == -1.0


def test_an_unparsable_ground_truth_is_an_error_not_a_silent_zero():
    with pytest.raises(ValueError, match="could not parse the ground truth"):
        math_answer.score(solution_str=r"\boxed{2}", ground_truth="")


def test_works_off_the_main_thread():
    # math-verify's own timeouts use SIGALRM, which only the main thread may set
    result = {}

    def run():
        result["out"] = math_answer.score(solution_str=r"\boxed{\frac{1}{2}}", ground_truth="0.5")

    t = threading.Thread(target=run)
    t.start()
    t.join(60)
    assert result["out"]["score"] == 1.0
