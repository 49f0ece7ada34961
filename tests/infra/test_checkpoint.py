"""Checkpoint atomicity, pruning and RNG state round-trips."""

import json
import os
import random

import numpy as np
import pytest
import torch
from rl_core.checkpoints.store import (
    LATEST_FILE,
    MARKER,
    CheckpointError,
    CheckpointManager,
    load_rng_state,
    save_rng_state,
)


def _writer(payload):
    def write(d):
        with open(os.path.join(d, "model.txt"), "w") as f:
            f.write(payload)
        os.makedirs(os.path.join(d, "optim"))
        with open(os.path.join(d, "optim", "rank0.pt"), "w") as f:
            f.write("x")

    return write


def test_save_writes_marker_manifest_and_latest_file(tmp_path):
    ckpt = CheckpointManager(str(tmp_path), keep_last=None)
    path = ckpt.save(5, _writer("five"), extra={"loader": {"epoch": 0, "index": 4}})
    assert path == str(tmp_path / "global_step_5") == ckpt.step_dir(5)
    manifest = json.loads((tmp_path / "global_step_5" / MARKER).read_text())
    assert manifest["step"] == 5
    assert manifest["files"] == ["model.txt", os.path.join("optim", "rank0.pt")]
    assert manifest["extra"] == {"loader": {"epoch": 0, "index": 4}}
    assert (tmp_path / LATEST_FILE).read_text().strip() == "5"
    assert ckpt.latest() == (5, path)
    # nothing temporary is left behind
    assert sorted(os.listdir(tmp_path)) == ["global_step_5", LATEST_FILE]


def test_simulated_crash_is_ignored_with_a_warning(tmp_path):
    ckpt = CheckpointManager(str(tmp_path), keep_last=3)
    good = ckpt.save(10, _writer("ten"))
    # crash 1: a save interrupted while writing into its temporary directory
    tmp = ckpt.begin(20, token="9999")
    (tmp_path / os.path.basename(tmp) / "model.txt").write_text("half")
    # crash 2: a step directory without the COMPLETE marker (e.g. copied by hand, or an older tool)
    (tmp_path / "global_step_30").mkdir()
    (tmp_path / "global_step_30" / "model.txt").write_text("no marker")
    with pytest.warns(UserWarning) as rec:
        assert ckpt.latest() == (10, good)
    messages = " ".join(str(w.message) for w in rec)
    assert "global_step_30" in messages and ".tmp_global_step_20_9999" in messages
    # a marker that disagrees with the directory name is also not trusted
    (tmp_path / "global_step_40").mkdir()
    (tmp_path / "global_step_40" / MARKER).write_text(json.dumps({"step": 4}))
    with pytest.warns(UserWarning) as rec:
        assert ckpt.latest() == (10, good)
    assert any("global_step_40" in str(w.message) and "says step 4" in str(w.message) for w in rec)


def test_failing_write_fn_leaves_nothing(tmp_path):
    ckpt = CheckpointManager(str(tmp_path), keep_last=2)
    ckpt.save(1, _writer("one"))

    def boom(d):
        (open(os.path.join(d, "partial"), "w")).close()
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        ckpt.save(2, boom)
    assert sorted(os.listdir(tmp_path)) == ["global_step_1", LATEST_FILE]
    assert ckpt.latest()[0] == 1


def test_keep_last_prunes_oldest_but_never_the_new_one_or_other_files(tmp_path):
    ckpt = CheckpointManager(str(tmp_path), keep_last=2)
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "tensorboard").mkdir()
    for step in (1, 2, 3, 4):
        ckpt.save(step, _writer(str(step)))
    assert [s for s, _ in ckpt.complete()] == [3, 4]
    # resuming from an old step and saving it again: the new one survives
    ckpt.save(2, _writer("again"))
    assert [s for s, _ in ckpt.complete()] == [2, 4]
    assert (tmp_path / "global_step_2" / "model.txt").read_text() == "again"
    assert (tmp_path / "notes.txt").read_text() == "mine"
    assert (tmp_path / "tensorboard").is_dir()


def test_keep_last_one_and_none(tmp_path):
    one = CheckpointManager(str(tmp_path / "a"), keep_last=1)
    for step in range(3):
        one.save(step, _writer("x"))
    assert [s for s, _ in one.complete()] == [2]
    every = CheckpointManager(str(tmp_path / "b"), keep_last=None)
    for step in range(3):
        every.save(step, _writer("x"))
    assert [s for s, _ in every.complete()] == [0, 1, 2]


def test_multi_writer_begin_commit(tmp_path):
    ckpt = CheckpointManager(str(tmp_path), keep_last=None)
    tmp = ckpt.begin(7, token="run42")
    for rank in range(2):  # every rank writes its shard into the shared directory
        (tmp_path / os.path.basename(ckpt.tmp_dir(7, "run42")) / f"shard_{rank}.pt").write_text(str(rank))
    with pytest.warns(UserWarning, match="under way"):  # not yet visible as complete
        assert ckpt.latest() is None
    path = ckpt.commit(7, token="run42")
    assert not os.path.exists(tmp)
    assert sorted(json.loads(open(os.path.join(path, MARKER)).read())["files"]) == ["shard_0.pt", "shard_1.pt"]


def test_bad_arguments_are_named(tmp_path):
    with pytest.raises(CheckpointError, match="keep_last"):
        CheckpointManager(str(tmp_path), keep_last=0)
    ckpt = CheckpointManager(str(tmp_path))
    with pytest.raises(CheckpointError, match="non-negative integer"):
        ckpt.step_dir(-1)
    with pytest.raises(CheckpointError, match="begin"):
        ckpt.commit(3, token="never")
    assert ckpt.latest() is None


def _draw():
    return (random.random(), np.random.rand(3).tolist(), torch.rand(3).tolist(), np.random.normal())


def test_rng_state_round_trip_through_torch_save(tmp_path):
    random.seed(1), np.random.seed(1), torch.manual_seed(1)
    np.random.normal()  # leaves a cached gaussian in numpy's state
    state = save_rng_state()
    torch.save(state, tmp_path / "rng.pt")
    expected = _draw()
    _draw()  # move on
    load_rng_state(torch.load(tmp_path / "rng.pt", weights_only=True))
    assert _draw() == expected


def test_rng_state_missing_keys(tmp_path):
    with pytest.raises(CheckpointError, match="python"):
        load_rng_state({"numpy": None, "torch": None})
