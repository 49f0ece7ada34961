"""Prompt data: reading jsonl/parquet, validation errors, filtering, resumable loading (generated rows: plugins/data/tests)."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from rl_core.config.schema import DataConfig
from rl_core.data.dataset import (
    DataError,
    PromptDataset,
    PromptLoader,
    load_prompt_dataset,
    pad_token_id_of,
    read_rows,
    validate_row,
)


def _row(i, words=1, **over):
    row = {
        "data_source": "toy",
        "prompt": [{"role": "system", "content": "be brief ."}, {"role": "user", "content": "what is " + " plus ".join([str(i)] * words) + " ?"}],
        "reward_model": {"style": "rule", "ground_truth": str(i * words)},
        "extra_info": {"index": i},
    }
    row.update(over)
    return row


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _write_parquet(path, rows):
    pq.write_table(pa.Table.from_pylist(rows), path)
    return str(path)


def test_jsonl_and_parquet_read_the_same_rows(tmp_path):
    rows = [_row(i) for i in range(5)]
    a = read_rows(_write_jsonl(tmp_path / "a.jsonl", rows))
    b = read_rows(_write_parquet(tmp_path / "b.parquet", rows))
    assert a == b
    assert a[3] == {
        "data_source": "toy",
        "prompt": rows[3]["prompt"],
        "ground_truth": "3",
        "extra_info": {"index": 3},
    }


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"question": "hi"}, r"row 2: no 'prompt' key .*data.prompt_key"),
        ({"prompt": "what is 2 ?"}, r"row 2: 'prompt' must be a non-empty list of \{'role': str, 'content': str\}"),
        ({"prompt": [{"role": "user"}]}, r"row 2: 'prompt' must be a non-empty list"),
        ({"reward_model": {"style": "rule"}}, r"row 2: no ground truth; a row needs reward_model.ground_truth"),
        ({"data_source": None}, r"row 2: no 'data_source'"),
    ],
)
def test_malformed_row_error_names_file_and_row(tmp_path, bad, message):
    rows = [_row(0), _row(1), {**_row(2), **bad}]
    if "question" in bad:
        del rows[2]["prompt"]
    path = _write_jsonl(tmp_path / "bad.jsonl", rows)
    with pytest.raises(DataError, match=message) as e:
        read_rows(path)
    assert str(e.value).startswith(f"{path}, row 2")


def test_unreadable_files_are_named(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        read_rows(str(tmp_path / "missing.jsonl"))
    (tmp_path / "x.csv").write_text("a,b\n")
    with pytest.raises(DataError, match="unknown format; use .jsonl"):
        read_rows(str(tmp_path / "x.csv"))
    (tmp_path / "torn.jsonl").write_text(json.dumps(_row(0)) + "\n{oops\n")
    with pytest.raises(DataError, match=r"torn.jsonl, line 2: not valid JSON"):
        read_rows(str(tmp_path / "torn.jsonl"))


def test_chat_template_tokenize_and_filter_overlong(tmp_path, tiny_tokenizer, caplog):
    rows = read_rows(_write_jsonl(tmp_path / "d.jsonl", [_row(i, words=1 + i % 4) for i in range(12)]))
    full = PromptDataset(rows, tiny_tokenizer, max_prompt_length=1000)
    lengths = [len(it["input_ids"]) for it in full]
    assert full.num_dropped == 0 and len(full) == 12
    text = full[0]["prompt_text"]
    assert text.startswith("<|im_start|>system\nbe brief .<|im_end|>") and text.endswith("<|im_start|>assistant\n")
    assert full[0]["input_ids"] == tiny_tokenizer(text, add_special_tokens=False)["input_ids"]

    limit = sorted(lengths)[5]
    with caplog.at_level("WARNING"):
        short = PromptDataset(rows, tiny_tokenizer, max_prompt_length=limit, source="d.jsonl")
    expected_dropped = sum(n > limit for n in lengths)
    assert 0 < expected_dropped < 12
    assert short.num_dropped == expected_dropped and len(short) == 12 - expected_dropped
    assert all(len(it["input_ids"]) <= limit for it in short)
    assert f"dropped {expected_dropped} of 12 prompts" in caplog.text

    with pytest.raises(DataError, match=r"d.jsonl, row \d+: the prompt has \d+ tokens > data.max_prompt_length"):
        PromptDataset(rows, tiny_tokenizer, max_prompt_length=limit, filter_overlong=False, source="d.jsonl")
    with pytest.raises(DataError, match="no prompts left"):
        PromptDataset(rows, tiny_tokenizer, max_prompt_length=2)


def test_raw_text_and_missing_chat_template(tmp_path, tiny_tokenizer):
    rows = [read_rows(_write_jsonl(tmp_path / "d.jsonl", [_row(7)]))[0]]
    raw = PromptDataset(rows, tiny_tokenizer, max_prompt_length=1000, apply_chat_template=False)
    assert raw[0]["prompt_text"] == "be brief .\nwhat is 7 ?"
    tiny_tokenizer.chat_template = None
    with pytest.raises(DataError, match="no chat template; set data.apply_chat_template=false"):
        PromptDataset(rows, tiny_tokenizer, max_prompt_length=100)


def test_load_prompt_dataset_from_config(tmp_path, tiny_tokenizer):
    j = _write_jsonl(tmp_path / "a.jsonl", [_row(i) for i in range(4)])
    p = _write_parquet(tmp_path / "b.parquet", [_row(i) for i in range(4, 10)])
    cfg = DataConfig(train_files=[j, p], val_files=[p], val_max_samples=3, max_prompt_length=1000)
    train = load_prompt_dataset(cfg, tiny_tokenizer, "train")
    assert [it["extra_info"]["index"] for it in train] == list(range(10))
    assert len(load_prompt_dataset(cfg, tiny_tokenizer, "val")) == 3
    with pytest.raises(DataError, match="no val data: set data.val_files or data.val_generator"):
        load_prompt_dataset(DataConfig(train_files=[j]), tiny_tokenizer, "val")


def _dataset(tok, n):
    return PromptDataset([validate_row(_row(i, words=1 + i % 3), "t", "prompt") for i in range(n)], tok, max_prompt_length=1000)


def test_batches_are_left_padded_with_uids(tiny_tokenizer):
    ds = _dataset(tiny_tokenizer, 6)
    loader = PromptLoader(ds, batch_size=3, shuffle=False, pad_token_id=pad_token_id_of(tiny_tokenizer))
    b = loader.next_batch()
    assert len(b) == 3 and list(b["uid"]) == ["e0-i0", "e0-i1", "e0-i2"]
    lens = [len(ds[i]["input_ids"]) for i in range(3)]
    width = max(lens)
    assert b["input_ids"].shape == (3, width) and b["input_ids"].dtype == torch.long
    for r, n in enumerate(lens):
        assert b["attention_mask"][r].tolist() == [0] * (width - n) + [1] * n
        assert b["input_ids"][r, : width - n].tolist() == [tiny_tokenizer.pad_token_id] * (width - n)
        assert b["input_ids"][r, width - n :].tolist() == ds[r]["input_ids"]
    assert list(b["ground_truth"]) == ["0", "2", "6"]
    assert b["prompt_text"][1] == ds[1]["prompt_text"] and b["data_source"][0] == "toy"


def _uids(batches):
    return [list(b["uid"]) for b in batches]


def test_loader_resume_equals_uninterrupted_across_epochs(tiny_tokenizer):
    ds = _dataset(tiny_tokenizer, 10)  # 3 batches of 3 per epoch, 1 prompt dropped each epoch
    ref = PromptLoader(ds, batch_size=3, shuffle=True, seed=7)
    assert len(ref) == 3
    straight = [ref.next_batch() for _ in range(8)]
    epochs = [b.meta["epoch"] for b in straight]
    assert epochs == [0, 0, 0, 1, 1, 1, 2, 2]
    # orders are seeded per epoch: different epochs, different orders; no prompt twice in an epoch
    e0 = sum(_uids(straight[:3]), [])
    e1 = sum(_uids(straight[3:6]), [])
    assert len(set(e0)) == 9 and [u[3:] for u in e0] != [u[3:] for u in e1]

    for stop in (2, 3, 4):  # in the middle of epoch 0, at its end, just after the boundary
        first = PromptLoader(ds, batch_size=3, shuffle=True, seed=7)
        got = [first.next_batch() for _ in range(stop)]
        state = json.loads(json.dumps(first.state_dict()))  # as it travels in a checkpoint
        resumed = PromptLoader(ds, batch_size=3, shuffle=True, seed=7)
        resumed.load_state_dict(state)
        got += [resumed.next_batch() for _ in range(8 - stop)]
        assert _uids(got) == _uids(straight), f"resume after {stop} batches"
        assert all(torch.equal(a["input_ids"], b["input_ids"]) for a, b in zip(got, straight))


def test_iteration_is_one_epoch_and_resumes_mid_epoch(tiny_tokenizer):
    ds = _dataset(tiny_tokenizer, 7)
    loader = PromptLoader(ds, batch_size=2, shuffle=False, drop_last=False)
    assert len(loader) == 4
    assert [len(b) for b in loader] == [2, 2, 2, 1]
    assert loader.state_dict()["epoch"] == 1
    loader.load_state_dict({"epoch": 0, "index": 4})
    assert _uids(list(loader)) == [["e0-i4", "e0-i5"], ["e0-i6"]]


def test_loader_errors(tiny_tokenizer):
    ds = _dataset(tiny_tokenizer, 4)
    with pytest.raises(DataError, match="fewer than one batch of 8; lower data.train_batch_size"):
        PromptLoader(ds, batch_size=8)
    loader = PromptLoader(ds, batch_size=2)
    with pytest.raises(DataError, match="saw 5 prompts but .* now has 4"):
        loader.load_state_dict({"epoch": 0, "index": 2, "num_prompts": 5})
    with pytest.raises(DataError, match="integer 'epoch' and 'index'"):
        loader.load_state_dict({"step": 3})


def test_build_loaders_and_validation_pass(tmp_path, tiny_tokenizer):
    from rl_core.data.dataset import build_loaders

    j = _write_jsonl(tmp_path / "train.jsonl", [_row(i) for i in range(9)])
    v = _write_jsonl(tmp_path / "val.jsonl", [_row(i, words=1 + i) for i in range(5)])
    val_lengths = [len(it["input_ids"]) for it in PromptDataset(read_rows(v), tiny_tokenizer, max_prompt_length=10**6)]
    limit = sorted(val_lengths)[2]  # every train prompt (one word) fits; the 2 longest val prompts do not
    cfg = DataConfig(train_files=[j], val_files=[v], train_batch_size=4, val_batch_size=2, max_prompt_length=limit)
    train, val, info = build_loaders(cfg, tiny_tokenizer, seed=3)
    assert len(train) == 2 and train.seed == 3 and train.shuffle
    dropped = info["val_dropped"]
    assert dropped == 2 and info == {"train_prompts": 9, "train_dropped": 0, "val_prompts": 5 - dropped, "val_dropped": dropped}
    train.next_batch()
    before = train.state_dict()
    passes = [[u for b in val.iterate_once() for u in b["uid"]] for _ in range(2)]
    assert passes[0] == passes[1] == [f"e0-i{i}" for i in range(5 - dropped)]  # all of it, every time
    assert train.state_dict() == before and val.state_dict()["index"] == 0
    _, none, _ = build_loaders(DataConfig(train_files=[j], train_batch_size=4, max_prompt_length=limit), tiny_tokenizer)
    assert none is None
