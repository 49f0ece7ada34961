"""`rlcore data gsm8k`: fetched from the hub through `datasets` when a network is there, a clear message
when not, local files with --src (.jsonl or .parquet); never overwrites its source; binary input named (issues 27, 31).

Nothing here touches the network: `datasets` is replaced by stand-ins that behave as the real one does
offline (ConnectionError) or when not installed; the real `datasets` call is exercised by hand (notes).
"""

from __future__ import annotations

import argparse
import sys
import types

import pytest
from rl_data import command as data_cmd
from rl_data import hub
from rl_data.convert import read_parquet

RECORDS = [{"question": "Tom has 3 apples and buys 4. How many?", "answer": "3 + 4 = 7\n#### 7"},
           {"question": "2 minus 12?", "answer": "2 - 12 = -10\n#### -10"}]


def cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="rlcore")
    data_cmd.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(list(argv))
    return args.func(args)


def fake_datasets(monkeypatch, load):
    mod = types.ModuleType("datasets")
    mod.load_dataset = load
    monkeypatch.setitem(sys.modules, "datasets", mod)


def test_fetch_from_the_hub_writes_the_default_file(tmp_path, monkeypatch, capsys):
    calls = []

    def load(repo, config, split):
        calls.append((repo, config, split))
        return RECORDS

    fake_datasets(monkeypatch, load)
    monkeypatch.setattr(hub, "hub_reachable", lambda timeout=3.0: True)
    monkeypatch.chdir(tmp_path)
    assert cli("data", "gsm8k", "--split", "test") == 0
    assert calls == [("openai/gsm8k", "main", "test")]
    assert "wrote 2 rows to data/gsm8k/test.parquet" in capsys.readouterr().out
    rows = read_parquet(tmp_path / "data" / "gsm8k" / "test.parquet")
    assert [r["reward_model"]["ground_truth"] for r in rows] == ["7", "-10"] and rows[1]["extra_info"]["split"] == "test"


def test_no_network_says_where_to_get_the_files(tmp_path, monkeypatch, capsys):
    seen_offline = []

    def load(repo, config, split):
        import os

        seen_offline.append(os.environ.get("HF_HUB_OFFLINE"))  # no network: the cache is tried without retries
        raise ConnectionError("Couldn't reach 'openai/gsm8k' on the Hub (LocalEntryNotFoundError)")

    fake_datasets(monkeypatch, load)
    monkeypatch.setattr(hub, "hub_reachable", lambda timeout=3.0: False)
    assert cli("data", "gsm8k", "--out", str(tmp_path / "x.parquet")) == 1
    err = capsys.readouterr().err.strip()
    assert seen_offline == ["1"]
    assert len(err.splitlines()) == 1 and "cannot be reached" in err and "huggingface.co/datasets/openai/gsm8k" in err and "--src" in err
    assert not (tmp_path / "x.parquet").exists()


def test_without_datasets_installed_says_what_to_install(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "datasets", None)  # import fails, as when it is not installed
    monkeypatch.setattr(hub, "hub_reachable", lambda timeout=3.0: False)
    assert cli("data", "gsm8k", "--out", str(tmp_path / "x.parquet")) == 1
    err = capsys.readouterr().err
    assert "pip install 'rl-data[hub]'" in err and "--src" in err


def test_a_local_parquet_source_and_never_over_itself(tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    src = tmp_path / "train-00000.parquet"  # the hub's file, downloaded by hand
    pq.write_table(pa.Table.from_pylist(RECORDS), src)
    before = src.read_bytes()
    assert cli("data", "gsm8k", "--src", str(src), "--out", str(src)) == 1
    assert "is the source file itself" in capsys.readouterr().err
    assert src.read_bytes() == before
    (tmp_path / "link.parquet").symlink_to(src)
    assert cli("data", "gsm8k", "--src", str(tmp_path / "link.parquet"), "--out", str(src)) == 1
    assert src.read_bytes() == before
    capsys.readouterr()
    assert cli("data", "gsm8k", "--src", str(src), "--out", str(tmp_path / "out.parquet")) == 0
    assert [r["extra_info"]["split"] for r in read_parquet(tmp_path / "out.parquet")] == ["train", "train"]


@pytest.mark.parametrize("content, words", [(b"\x00\x01\x02PK\x03\x04" * 50, "a binary file"), (b"\xff\xfe{\"q\": 1}\n", "not UTF-8 text"),
                                            (b"PAR1" + b"x" * 40, "a binary file")])
def test_a_binary_source_is_one_clear_error(tmp_path, capsys, content, words):
    src = tmp_path / "train.jsonl"
    src.write_bytes(content)
    assert cli("data", "gsm8k", "--src", str(src), "--out", str(tmp_path / "o.parquet")) == 1
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1 and words in err and str(src) in err


def test_gsm8k_from_shared_jsonl_when_present(tmp_path, shared_data):
    src = shared_data / "gsm8k" / "test.jsonl"
    if not src.is_file():
        pytest.skip(f"needs {src}")
    assert cli("data", "gsm8k", "--src", str(src), "--out", str(tmp_path / "t.parquet")) == 0
    assert len(read_parquet(tmp_path / "t.parquet")) == sum(1 for line in src.read_text().splitlines() if line.strip())
