"""reasoning_gym reward: rows written by rl-data (rl_data.convert), scored by the dataset's own score_answer."""

from __future__ import annotations

import pytest

pytest.importorskip("reasoning_gym", reason="the reasoning_gym reward needs the reasoning-gym package")
pytest.importorskip("rl_data", reason="the rows come from rl-data's generator: pip install -e plugins/data")

from rl_data.convert import generate_reasoning_gym_rows  # noqa: E402
from rl_reward_rule import rgym  # noqa: E402


def _score(row, response, **kw):
    return rgym.score(
        data_source=row["data_source"],
        solution_str=response,
        ground_truth=row["reward_model"]["ground_truth"],
        extra_info=row["extra_info"],
        **kw,
    )


@pytest.fixture(scope="module")
def arithmetic_rows():
    return generate_reasoning_gym_rows("basic_arithmetic", 20, 3, {"max_terms": 3}, "Answer with the final number only.")


def test_right_answers_score_one_wrong_answers_zero(arithmetic_rows):
    for row in arithmetic_rows:
        truth = row["reward_model"]["ground_truth"]
        assert _score(row, truth)["score"] == 1.0
        assert _score(row, f"Let me think.\n<answer>{truth}</answer>")["score"] == 1.0
        wrong = str(int(truth) + 1)
        assert _score(row, wrong) == {"score": 0.0, "acc": 0.0}
        assert _score(row, f"<answer>{truth}</answer> no, <answer>{wrong}</answer>")["score"] == 0.0  # last tag counts


def test_answer_tag_none_passes_the_whole_response(arithmetic_rows):
    row = arithmetic_rows[0]
    truth = row["reward_model"]["ground_truth"]
    assert _score(row, f"<answer>{truth}</answer>", answer_tag=None)["score"] < 1.0


def test_tuple_metadata_survives_the_row_format():
    # ARC compares the answer grid with a tuple of tuples in the metadata: a plain
    # JSON round trip (tuples -> lists) would score every right answer 0.05.
    rows = generate_reasoning_gym_rows("arc_agi", 2, 0)
    for row in rows:
        assert _score(row, row["reward_model"]["ground_truth"])["score"] == 1.0


def test_entry_regenerated_from_config_and_index_when_not_stored(arithmetic_rows):
    row = dict(arithmetic_rows[5])
    row["extra_info"] = {**row["extra_info"], "entry": None}
    assert _score(row, row["reward_model"]["ground_truth"])["score"] == 1.0
    row["extra_info"] = {k: v for k, v in row["extra_info"].items() if k not in ("entry", "config")}
    with pytest.raises(ValueError, match="extra_info needs 'entry'"):
        _score(row, "1")


def test_dataset_name_from_data_source_or_extra_info():
    assert rgym.dataset_name("reasoning_gym/chain_sum", None) == "chain_sum"
    assert rgym.dataset_name("whatever", {"dataset": "products"}) == "products"
    with pytest.raises(ValueError, match="cannot tell the dataset"):
        rgym.dataset_name("my_source", {})
