"""The trace writer: columns computed independently from the batch, atomic files, the budget, resume without
duplicates or gaps; the reader pages by step; the exporter writes rows rl-core's data reader reads."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from rl_core.data.dataset import read_rows
from rl_core_testing.tiny_model import build_tokenizer
from rl_traces import page as page_mod
from rl_traces import writer as writer_mod
from rl_traces.command import export
from rl_traces.options import TracesOptions
from rl_traces.reader import Traces, TracesError
from rl_traces.synthetic import synthetic_rollouts
from rl_traces.writer import TraceWriter, make, step_file


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


def _write_steps(w: TraceWriter, tok, steps, **kw) -> None:
    for s in steps:
        w.on_rollouts(synthetic_rollouts(s, tok, **kw))
        w.on_step_end(s)


def test_columns_are_the_batchs(tmp_path, tok):
    r = synthetic_rollouts(5, tok, multi_turn=True)
    w = TraceWriter(tmp_path / "traces", TracesOptions(token_limit=4))
    w.on_start(0)
    w.on_rollouts(r)
    w.on_step_end(5)
    rows = pq.read_table(step_file(tmp_path / "traces", "train", 5)).to_pylist()
    b = r.batch
    assert len(rows) == len(b) == 32
    mask = b["response_mask"].bool()
    for i, row in enumerate(rows):
        m = mask[i]
        assert row["step"] == 5 and row["phase"] == "train" and row["policy_version"] == 4
        assert row["group"] == b.non_tensors["uid"][i] and row["sample"] == i % 4
        assert row["reward"] == pytest.approx(float(r.scores[i]))
        assert row["advantage"] == pytest.approx(float(b["advantages"][i][m].mean()), abs=1e-6)
        gap = (b["old_log_probs"][i][m] - b["rollout_log_probs"][i][m]).abs().mean()
        assert row["logprob_gap"] == pytest.approx(float(gap), abs=1e-6)
        ids = b["responses"][i][m].tolist()
        assert row["response_length"] == len(ids)
        assert row["finish_reason"] == "no_tool_call" and not row["truncated"]  # multi-turn: the agent's stop reason
        assert "".join(row["tokens"]) == tok.decode(ids[:4])  # the colouring's pieces, bounded by token_limit
        assert row["token_gap"] == pytest.approx((b["old_log_probs"][i] - b["rollout_log_probs"][i])[: min(4, len(ids))].tolist(), abs=1e-6)
        assert json.loads(row["reward_parts"]) == {"acc": float(r.scores[i])}
        turns = json.loads(row["turns"])
        assert [t["role"] for t in turns] == ["assistant", "tool", "assistant"]
        err = b.non_tensors["extra_info"][i]["agent"]["turns"][0]["tool_results"][0]["status"] == "error"
        assert turns[1]["status"] == ("error" if err else "ok") and row["tool_errors"] == int(err) and row["tool_calls"] == 1
        assert json.loads(row["prompt_messages"])[1]["content"].startswith("What is")
    meta = Traces(tmp_path).summary("train", 5)
    assert meta["samples"] == 32 and meta["reward_mean"] == pytest.approx(float(r.scores.mean()))
    assert meta["tool_errors"] == sum(row["tool_errors"] for row in rows)


def test_single_turn_truncation(tmp_path, tok):
    r = synthetic_rollouts(2, tok)
    w = TraceWriter(tmp_path / "traces", TracesOptions())
    w.on_start(0)
    w.on_rollouts(r)
    w.on_step_end(2)
    rows = Traces(tmp_path).read("train", 2).to_pylist()
    mask = r.batch["response_mask"].bool()
    expect = [len(ids := r.batch["responses"][i][mask[i]].tolist()) == 16 and ids[-1] != tok.eos_token_id for i in range(len(rows))]
    assert [row["truncated"] for row in rows] == expect and any(expect) and not all(expect)
    assert [row["finish_reason"] for row in rows] == ["length" if e else "stop" for e in expect]
    assert Traces(tmp_path).summary("train", 2)["truncated"] == sum(expect)


def test_a_failed_write_leaves_the_previous_file_and_no_half_file(tmp_path, tok, monkeypatch):
    root = tmp_path / "traces"
    w = TraceWriter(root, TracesOptions())
    w.on_start(0)
    _write_steps(w, tok, [1])
    before = step_file(root, "train", 1).read_bytes()
    real = pq.write_table

    def half(table, where, **kw):  # some bytes reach the disk, then it fails
        Path(where).write_bytes(b"PAR1 half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(writer_mod.pq, "write_table", half)
    with pytest.raises(OSError):
        w.on_rollouts(synthetic_rollouts(1, tok, seed=9))
        w.on_step_end(1)
    assert step_file(root, "train", 1).read_bytes() == before
    assert not [p for p in (root / "train").iterdir() if p.name.startswith(".")]
    monkeypatch.setattr(writer_mod.pq, "write_table", real)
    (root / "train" / ".step_00000002.parquet.123.tmp").write_bytes(b"x")  # as a killed process leaves it
    TraceWriter(root, TracesOptions()).on_start(1)
    assert sorted(p.name for p in (root / "train").iterdir()) == ["step_00000001.parquet"]


def test_budget_keeps_everything_then_a_fixed_share(tmp_path, tok):
    root = tmp_path / "traces"
    w = TraceWriter(root, TracesOptions(budget_mb=20_000 / 2**20, share_after_budget=0.25))
    w.on_start(0)
    _write_steps(w, tok, range(1, 41), groups=16)
    t = Traces(tmp_path)
    kept = [t.summary("train", s)["kept"] for s in t.steps("train")]
    assert all(t.summary("train", s)["samples"] == 64 for s in t.steps("train"))  # the summary counts every sample
    full = [k for k in kept if k == 64]
    assert 1 <= len(full) < 10 and kept[: len(full)] == full  # whole steps until the budget is spent
    later = kept[len(full):]
    assert 0.15 < sum(later) / (64 * len(later)) < 0.35  # then about a quarter of the groups
    assert all(k % 4 == 0 for k in later)  # whole groups
    # the same groups again on a rerun of a step (a resumed run writes what the first one would have)
    rows = t.read("train", 40, ["group"]).column("group").to_pylist()
    w2 = TraceWriter(root, w.options)
    w2.on_start(39)
    _write_steps(w2, tok, [40], groups=16)
    assert t.read("train", 40, ["group"]).column("group").to_pylist() == rows
    # bounded: the folder holds the budget plus one step, then per step a share of it and a file's fixed footer
    per_step = max(step_file(root, "train", s).stat().st_size for s in range(1, len(full) + 1))
    one = TraceWriter(tmp_path / "one", TracesOptions())
    _write_steps(one, tok, [1], groups=1)
    footer = step_file(tmp_path / "one", "train", 1).stat().st_size  # a file of one group: a file's fixed bytes and a bit
    per_row = (per_step - footer) / 64
    for s, k in zip(range(len(full) + 1, 41), later):  # fewer rows compress a little worse: 1.5x a full step's bytes per row
        assert step_file(root, "train", s).stat().st_size <= footer + 1.5 * k * per_row
    assert sum(step_file(root, "train", s).stat().st_size for s in range(1, len(full))) < 20_000  # the budget, then one more step


def test_resume_continues_without_duplicates_or_gaps(tmp_path, tok):
    root = tmp_path / "traces"
    w = TraceWriter(root, TracesOptions())
    w.on_start(0)
    w.on_rollouts(synthetic_rollouts(0, tok, phase="val"))
    w.on_step_end(0)
    _write_steps(w, tok, range(1, 6))
    w.on_rollouts(synthetic_rollouts(4, tok, phase="val"))
    w.on_step_end(4)
    # the run crashed after step 5; its last checkpoint was step 3: the rerun starts after step 3
    w2 = TraceWriter(root, TracesOptions())
    w2.on_start(3)
    t = Traces(tmp_path)
    assert t.steps("train") == [1, 2, 3] and t.steps("val") == [0]
    assert w2.used == sum(p.stat().st_size for ph in ("train", "val") for p in (root / ph).iterdir())
    _write_steps(w2, tok, range(4, 8), seed=1)
    assert t.steps("train") == list(range(1, 8))
    for s in t.steps("train"):
        steps = t.read("train", s, ["step"]).column("step").to_pylist()
        assert steps == [s] * 32
    # a fresh start (no checkpoint) starts the traces over
    TraceWriter(root, TracesOptions()).on_start(0)
    assert t.steps("train") == [] and t.steps("val") == []


def test_off_and_validation_off(tmp_path, tok):
    assert make(None, {"enable": False}, str(tmp_path)) is None
    w = make(None, {"validation": False}, str(tmp_path))
    w.on_start(0)
    w.on_rollouts(synthetic_rollouts(0, tok, phase="val"))
    w.on_step_end(0)
    assert Traces(tmp_path).steps("val") == []


def test_reader_pages_by_step(tmp_path, tok, monkeypatch):
    w = TraceWriter(tmp_path / "traces", TracesOptions())
    w.on_start(0)
    _write_steps(w, tok, range(1, 61))
    reads = []
    real = page_mod.Traces.read

    def counting(self, phase, step, columns=None):
        table = real(self, phase, step, columns)
        reads.append((phase, step, table.num_rows))
        return table

    monkeypatch.setattr(page_mod.Traces, "read", counting)
    data = page_mod.page_data(tmp_path, max_samples=200)
    assert len(data["steps"]["train"]) == 60  # every step in the table, from the footers
    assert data["steps"]["train"][-1]["step"] == 60
    shown = sum(len(v) for v in data["samples"]["train"].values())
    assert 0 < shown <= 200 and len(reads) == len(data["samples"]["train"]) <= 7  # only the steps shown are read
    assert max(n for _, _, n in reads) == 32  # one step at a time
    assert "60" in {str(k) for k in data["samples"]["train"]}  # the last step is always in


def test_export_is_a_data_set(tmp_path, tok):
    w = TraceWriter(tmp_path / "traces", TracesOptions())
    w.on_start(0)
    _write_steps(w, tok, [1, 2])
    for name in ("step2.jsonl", "step2.parquet"):
        path = export(tmp_path, 2, tmp_path / name)
        rows = read_rows(str(path))  # what a run's data.train_files / data.val_files reads
        table = Traces(tmp_path).read("train", 2)
        assert len(rows) == table.num_rows == 32
        assert rows[0]["prompt"] == json.loads(table.column("prompt_messages")[0].as_py())
        assert [r["ground_truth"] for r in rows] == table.column("ground_truth").to_pylist()
        assert [r["data_source"] for r in rows] == ["synthetic/add"] * 32
        raw = pq.read_table(path).to_pylist() if name.endswith(".parquet") else [json.loads(x) for x in path.read_text().splitlines()]
        assert [r["response"] for r in raw] == table.column("response").to_pylist()
        assert [r["reward"] for r in raw] == pytest.approx(table.column("reward").to_pylist())
    with pytest.raises(TracesError, match="no train traces of step 9"):
        export(tmp_path, 9)
    with pytest.raises(TracesError, match="no traces under"):
        Traces(tmp_path / "traces" / "train")


def test_nan_free_page_data(tmp_path, tok):
    """Steps without log-probs (rollout.calculate_log_probs off): NaN gaps become nulls, the page's JSON is valid."""
    w = TraceWriter(tmp_path / "traces", TracesOptions())
    w.on_start(0)
    _write_steps(w, tok, [1], log_probs=False)
    data = page_mod.page_data(tmp_path)
    s = data["samples"]["train"][1][0]
    assert s["logprob_gap"] is None and s["token_gap"] == [] and not math.isnan(s["advantage"])
    html = page_mod.render(data)
    blob = html.split('id="trace-data">')[1].split("</script>")[0]

    def refuse(name):
        raise AssertionError(f"{name} in the page's data")

    assert json.loads(blob, parse_constant=refuse)["samples"]["train"]["1"][0]["logprob_gap"] is None
    assert "<script src" not in html and "http" not in html.split("<script>")[1]  # nothing fetched
