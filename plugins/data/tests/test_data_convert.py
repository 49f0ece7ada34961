"""`rlcore data` and rl_data.convert: GSM8K and reasoning-gym rows in verl's format."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from rl_data import command as data_cmd
from rl_data.convert import gsm8k_final_answer, read_parquet

from tests.conftest import SHARED_DATA

GSM8K_TEST = SHARED_DATA / "gsm8k" / "test.jsonl"
SUFFIX = ' Let\'s think step by step and output the final answer after "####".'

RECORDS = [
    {"question": "Tom has 3 apples and buys 4. How many?", "answer": "3 + 4 = <<3+4=7>>7\n#### 7"},
    {"question": "A car costs $1,500 more than 500. Price?", "answer": "500 + 1500 = 2000\n#### 2,000"},
    {"question": "It was 2 degrees and fell by 12. Now?", "answer": "2 - 12 = -10\n#### -10"},
]


def cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="rlcore")
    data_cmd.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(list(argv))
    return args.func(args)


def write_jsonl(path: Path, records) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_gsm8k_round_trip(tmp_path, capsys):
    src = write_jsonl(tmp_path / "train.jsonl", RECORDS)
    out = tmp_path / "out" / "train.parquet"
    assert cli("data", "gsm8k", "--src", str(src), "--out", str(out)) == 0
    assert "wrote 3 rows" in capsys.readouterr().out
    rows = read_parquet(out)
    assert [r["reward_model"] for r in rows] == [
        {"style": "rule", "ground_truth": "7"},
        {"style": "rule", "ground_truth": "2000"},
        {"style": "rule", "ground_truth": "-10"},
    ]
    for i, (row, rec) in enumerate(zip(rows, RECORDS)):
        assert row["data_source"] == "openai/gsm8k" and row["ability"] == "math"
        assert row["prompt"] == [{"role": "user", "content": rec["question"] + SUFFIX}]
        assert row["extra_info"] == {"split": "train", "index": i, "answer": rec["answer"], "question": rec["question"]}


def test_gsm8k_real_test_set(tmp_path):
    if not GSM8K_TEST.is_file():
        pytest.skip(f"needs {GSM8K_TEST} (the shared GSM8K copy on the project's machines, not in a clone)")
    out = tmp_path / "test.parquet"
    assert cli("data", "gsm8k", "--src", str(GSM8K_TEST), "--out", str(out)) == 0
    rows = read_parquet(out)
    source = [json.loads(line) for line in GSM8K_TEST.read_text().splitlines()]
    assert len(rows) == len(source) == 1319
    assert {r["extra_info"]["split"] for r in rows} == {"test"}
    for row, rec in zip(rows, source):
        assert row["extra_info"]["question"] == rec["question"]
        truth = row["reward_model"]["ground_truth"]
        assert truth.lstrip("-").isdigit() and truth in rec["answer"].replace(",", "")


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def test_missing_source_file(tmp_path, capsys):
    assert cli("data", "gsm8k", "--src", str(tmp_path / "absent.jsonl"), "--out", str(tmp_path / "x.parquet")) == 1
    line = one_line_error(capsys)
    assert "absent.jsonl: no such file" in line and "--src" in line


@pytest.mark.parametrize(
    "content, expected",
    [
        ('{"question": "q"}\n', "line 1: no 'answer' string"),
        ('{"question": "q", "answer": "#### 1"}\n{"answer": "#### 2"}\n', "line 2: no 'question' string"),
        ('{"question": "q", "answer": "no marker"}\n', "line 1: the answer has no '####' line"),
        ("not json\n", "line 1: not valid JSON"),
        ("\n", "the file has no rows"),
    ],
)
def test_bad_gsm8k_rows(tmp_path, capsys, content, expected):
    src = tmp_path / "bad.jsonl"
    src.write_text(content)
    assert cli("data", "gsm8k", "--src", str(src), "--out", str(tmp_path / "x.parquet")) == 1
    line = one_line_error(capsys)
    assert str(src) in line and expected in line
    assert not (tmp_path / "x.parquet").exists()


def test_gsm8k_final_answer():
    assert gsm8k_final_answer("... #### 1,234") == "1234"
    assert gsm8k_final_answer("#### 5\n#### 6.") == "6"
    with pytest.raises(ValueError):
        gsm8k_final_answer("no marker")


# ------------------------------------------------------------ reasoning-gym
def test_unknown_reasoning_gym_dataset(tmp_path, capsys):
    pytest.importorskip("reasoning_gym")
    assert cli("data", "reasoning-gym", "basic_arithmetc", "--size", "3", "--out", str(tmp_path / "x.parquet")) == 1
    line = one_line_error(capsys)
    assert "no dataset 'basic_arithmetc'" in line and "did you mean basic_arithmetic" in line


@pytest.mark.parametrize(
    "extra, expected",
    [(["--kwargs", "{bad"], "--kwargs is not valid JSON"), (["--kwargs", '{"max_terms": 0}'], "could not create")],
)
def test_bad_reasoning_gym_options(tmp_path, capsys, extra, expected):
    pytest.importorskip("reasoning_gym")
    out = tmp_path / "x.parquet"
    assert cli("data", "reasoning-gym", "basic_arithmetic", "--size", "3", "--out", str(out), *extra) == 1
    assert expected in one_line_error(capsys)


def test_reasoning_gym_rows_are_scored_by_the_reasoning_gym_reward(tmp_path):
    pytest.importorskip("reasoning_gym")
    pytest.importorskip("rl_reward_rule", reason="the reasoning_gym reward is in rl-reward-rule: pip install -e plugins/reward_rule")
    from rl_core.batch import Batch
    from rl_core.config.schema import RewardConfig
    from rl_core.plugins import get_registry
    from rl_core.rewards.manager import RewardManager

    out = tmp_path / "arith.parquet"
    code = cli(
        "data", "reasoning-gym", "basic_arithmetic", "--size", "12", "--seed", "5", "--out", str(out),
        "--system-prompt", "Answer with the final number only.", "--kwargs", '{"max_terms": 2, "max_digits": 2}',
    )
    assert code == 0
    rows = read_parquet(out)
    assert len(rows) == 12
    assert rows[0]["data_source"] == "reasoning_gym/basic_arithmetic"
    assert rows[0]["prompt"][0] == {"role": "system", "content": "Answer with the final number only."}
    assert rows[0]["extra_info"]["dataset"] == "basic_arithmetic"
    truths = [r["reward_model"]["ground_truth"] for r in rows]
    right = truths
    wrong = [str(int(t) + 1) for t in truths]
    batch = Batch(
        non_tensors={
            "response_text": right + wrong,
            "data_source": [r["data_source"] for r in rows] * 2,
            "ground_truth": truths * 2,
            "extra_info": [r["extra_info"] for r in rows] * 2,
        }
    )
    scores, _, _ = RewardManager(RewardConfig(), get_registry(reload=True)).score(batch)
    assert scores.tolist() == [1.0] * 12 + [0.0] * 12
