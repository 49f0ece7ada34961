"""Bad prompt data is a clear error naming the file (and row), never a traceback (issue 11, items 4 and 7)."""

from __future__ import annotations

import json

import pytest

from tests.reliability import tally
from tests.reliability.runs import cli, make_run

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
pytest.importorskip("rl_train_fsdp", reason="needs the rl-train-fsdp plugin (pip install -e plugins/train_fsdp)")


def _row(i, **change):
    row = {
        "data_source": "tiny/digits",
        "prompt": [{"role": "user", "content": f"{i}+1="}],
        "reward_model": {"style": "rule", "ground_truth": str(i + 1)},
    }
    row.update(change)
    return row


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _parquet(path, rows):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)


BAD_ROW = 5  # the faulty row's index in a file of 16


def _with_bad_row(bad):
    return [bad if i == BAD_ROW else _row(i) for i in range(16)]


# name -> (writer(path) -> data file name, words the error must contain)
FAULTS = {
    "missing ground truth": (lambda d: _jsonl(d / "t.jsonl", _with_bad_row({k: v for k, v in _row(5).items() if k != "reward_model"})) or "t.jsonl", ["row 5", "ground_truth"]),
    "missing prompt": (lambda d: _jsonl(d / "t.jsonl", _with_bad_row({k: v for k, v in _row(5).items() if k != "prompt"})) or "t.jsonl", ["row 5", "'prompt'"]),
    "empty prompt list": (lambda d: _jsonl(d / "t.jsonl", _with_bad_row(_row(5, prompt=[]))) or "t.jsonl", ["row 5", "non-empty list"]),
    "empty message text": (lambda d: _jsonl(d / "t.jsonl", _with_bad_row(_row(5, prompt=[{"role": "user", "content": "  "}]))) or "t.jsonl", ["row 5", "empty"]),
    "non-string content": (lambda d: _jsonl(d / "t.jsonl", _with_bad_row(_row(5, prompt=[{"role": "user", "content": 42}]))) or "t.jsonl", ["row 5", "'content': str"]),
    "unknown role": (lambda d: _jsonl(d / "t.jsonl", _with_bad_row(_row(5, prompt=[{"role": "robot", "content": "hi"}]))) or "t.jsonl", ["row 5", "robot"]),
    "no data_source": (lambda d: _jsonl(d / "t.jsonl", _with_bad_row(_row(5, data_source=None))) or "t.jsonl", ["row 5", "data_source"]),
    "row not an object": (lambda d: _jsonl(d / "t.jsonl", _with_bad_row([1, 2])) or "t.jsonl", ["row 5"]),
    "torn json line": (lambda d: (d / "t.jsonl").write_text(json.dumps(_row(0)) + "\n{\"data_source\": \n" + json.dumps(_row(2)) + "\n") and "t.jsonl", ["line 2"]),
    "corrupted parquet": (lambda d: (d / "t.parquet").write_bytes(b"PAR1" + bytes(range(256)) * 4) and "t.parquet", ["parquet"]),
    "truncated parquet": (lambda d: _truncated_parquet(d) or "t.parquet", ["parquet"]),
    "zero-byte parquet": (lambda d: (d / "t.parquet").write_bytes(b"") or "t.parquet", ["parquet"]),
    "empty parquet (no rows)": (lambda d: _parquet(d / "t.parquet", []) or "t.parquet", ["no rows"]),
    "missing file": (lambda d: "nothing_here.jsonl", ["does not exist"]),
    "over-long prompt, filter off": (lambda d: _jsonl(d / "t.jsonl", _with_bad_row(_row(5, prompt=[{"role": "user", "content": "9 " * 400}]))) or "t.jsonl", ["row 5", "max_prompt_length"]),
    "chat template rejects a role": (lambda d: _template_rejecting_system(d) or "t.jsonl", ["row 5", "chat template rejected", "system"]),
}


def _truncated_parquet(d):
    _parquet(d / "full.parquet", [_row(i) for i in range(16)])
    data = (d / "full.parquet").read_bytes()
    (d / "t.parquet").write_bytes(data[: len(data) // 2])


def _template_rejecting_system(d):
    (d / "model" / "chat_template.jinja").write_text(
        "{% for m in messages %}{% if m['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
        "{{ m['role'] + ': ' + m['content'] + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ 'assistant: ' }}{% endif %}"
    )
    _jsonl(d / "t.jsonl", _with_bad_row(_row(5, prompt=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "1+1="}])))


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_data_fault_is_a_clear_error(tmp_path, fault):
    write, words = FAULTS[fault]
    cfg = make_run(tmp_path)
    name = write(tmp_path)
    path = tmp_path / name
    code, out, err = cli(
        "train", str(cfg), "--no-progress", f"data.train_files=[{path}]", f"data.val_files=[{path}]", "data.filter_overlong_prompts=false"
    )
    ok = code != 0 and "Traceback" not in err and str(path) in err and all(w in err for w in words)
    tally.record("data", fault, ok)
    assert code != 0, out + err
    assert "Traceback" not in err, err
    assert str(path) in err, err
    for w in words:
        assert w in err, (w, err)


def test_over_long_prompts_are_dropped_and_counted(tmp_path, caplog):
    """filter_overlong_prompts=true (the default): long prompts are dropped with a count, the rest train."""
    from rl_core.data.dataset import PromptDataset, read_rows
    from rl_core.modeling import load_tokenizer
    from rl_core_testing.tiny_model import make_tiny_model_dir

    rows_file = tmp_path / "t.jsonl"
    _jsonl(rows_file, _with_bad_row(_row(5, prompt=[{"role": "user", "content": "9 " * 400}])))
    tok = load_tokenizer(str(make_tiny_model_dir(tmp_path / "model")))
    ds = PromptDataset(read_rows(str(rows_file)), tok, max_prompt_length=32, source=str(rows_file))
    ok = ds.num_dropped == 1 and len(ds) == 15 and "dropped 1 of 16" in caplog.text
    tally.record("data", "over-long prompt, filter on (dropped and counted)", ok)
    assert ok, (ds.num_dropped, len(ds), caplog.text)
