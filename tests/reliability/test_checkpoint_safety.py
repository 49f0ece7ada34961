"""Checkpoints never run code and damaged ones are skipped (issue 11, items 1 and 5)."""

from __future__ import annotations

import json
import logging
import pickle

import pytest
import torch
from rl_core.checkpoints.store import MARKER, CheckpointError, file_digest, safe_load
from rl_train_fsdp.dcp_io import check_dcp_metadata

from tests.reliability import tally
from tests.reliability.evil import WritesMarker, payload
from tests.reliability.runs import cli, copy_run, read_metrics

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _forge_manifest(step_dir):
    """What an attacker who copies a whole folder can do: make the manifest match the planted files."""
    man = json.loads((step_dir / MARKER).read_text())
    man["digests"] = {name: file_digest(str(step_dir / name)) for name in man["files"]}
    (step_dir / MARKER).write_text(json.dumps(man))


def test_payload_really_runs_under_a_plain_pickle_load(tmp_path):
    """The test's payload is live: a plain (weights_only=False) load writes the marker."""
    marker = tmp_path / "ran"
    pickle.loads(payload(str(marker)))
    assert marker.exists()


@pytest.mark.parametrize("where", ["trainer_state.pt", "actor/extra_rank0.pt", "actor/dcp/.metadata"])
def test_planted_pickle_in_a_forged_checkpoint_is_refused(finished_run, tmp_path, where):
    cfg = copy_run(finished_run, tmp_path / "run")
    step2 = tmp_path / "run" / "out" / "checkpoints" / "global_step_2"
    marker = tmp_path / "PWNED"
    target = step2 / where
    if where.endswith(".pt"):
        torch.save({"step": 2, "scheduler": WritesMarker(str(marker))}, target)
    else:
        target.write_bytes(payload(str(marker)))
    _forge_manifest(step2)
    code, out, err = cli("train", str(cfg), "--no-progress", "trainer.total_training_steps=3")
    ok = code == 1 and "refused to load" in err and where.split("/")[-1] in err and "Traceback" not in err and not marker.exists()
    tally.record("malicious", f"planted pickle in {where}", ok)
    assert not marker.exists(), "the planted pickle ran"
    assert code == 1 and "refused to load" in err and str(target) in err, out + err
    assert "Traceback" not in err


def test_planted_folder_without_a_manifest_is_ignored(finished_run, tmp_path, caplog):
    cfg = copy_run(finished_run, tmp_path / "run")
    planted = tmp_path / "run" / "out" / "checkpoints" / "global_step_9"
    planted.mkdir()
    marker = tmp_path / "PWNED"
    torch.save({"x": WritesMarker(str(marker))}, planted / "trainer_state.pt")
    with caplog.at_level(logging.WARNING):
        code, out, err = cli("train", str(cfg), "--no-progress", "trainer.total_training_steps=3")
    ok = code == 0 and "(step 2)" in out and not marker.exists() and "global_step_9" in caplog.text
    tally.record("malicious", "planted folder without manifest", ok)
    assert code == 0, out + err
    assert "(step 2)" in out and "global_step_9" in caplog.text and not marker.exists()


def _truncate(p):
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])


def _flip(p):
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0xFF
    p.write_bytes(bytes(data))


DAMAGE = {
    "truncated weights": ("actor/dcp/__0_0.distcp", _truncate),
    "flipped byte": ("actor/dcp/__0_0.distcp", _flip),
    "missing file": ("actor/extra_rank0.pt", lambda p: p.unlink()),
    "extra file": ("actor/notes.pt", lambda p: p.write_bytes(b"x")),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_damaged_latest_checkpoint_falls_back_to_the_previous_one(finished_run, tmp_path, caplog, damage):
    cfg = copy_run(finished_run, tmp_path / "run")
    out_dir = tmp_path / "run" / "out"
    step2 = out_dir / "checkpoints" / "global_step_2"
    name, fn = DAMAGE[damage]
    fn(step2 / name)
    with caplog.at_level(logging.WARNING):
        code, out, err = cli("train", str(cfg), "--no-progress", "trainer.total_training_steps=3")
    rows = read_metrics(out_dir)
    ok = code == 0 and "(step 1)" in out and str(step2) in caplog.text and [r["step"] for r in rows] == [1, 2, 3]
    tally.record("malicious", f"damaged latest checkpoint: {damage}", ok)
    assert code == 0, out + err
    assert "(step 1)" in out, out
    assert f"checkpoint {step2} is damaged" in caplog.text
    assert [r["step"] for r in rows] == [1, 2, 3]
    # the redone step 2 replaced the damaged folder with a good one
    assert (out_dir / "checkpoints" / "global_step_2" / MARKER).exists()


def test_safe_load_refuses_objects_and_reads_tensors(tmp_path):
    good = tmp_path / "good.pt"
    torch.save({"a": torch.arange(3), "b": [1, 2.0, "x", None]}, good)
    assert safe_load(str(good))["b"] == [1, 2.0, "x", None]
    bad = tmp_path / "bad.pt"
    marker = tmp_path / "ran"
    torch.save({"a": WritesMarker(str(marker))}, bad)
    with pytest.raises(CheckpointError, match="refused to load"):
        safe_load(str(bad))
    assert not marker.exists()


def test_dcp_metadata_of_a_real_checkpoint_passes_the_check(finished_run):
    check_dcp_metadata(str(finished_run / "out" / "checkpoints" / "global_step_2" / "actor" / "dcp"))


def _nested(p):
    p.write_text("[" * 200_000 + "]" * 200_000)  # valid JSON nested past the parser's stack


NESTED = {"COMPLETE": MARKER, "run_config.json": "run_config.json", "optimizer plain state": "actor/optim_plain.json"}


@pytest.mark.parametrize("where", sorted(NESTED))
def test_deeply_nested_json_in_a_checkpoint_falls_back_to_the_previous_one(finished_run, tmp_path, where):
    """JSON of any shape (here nesting that overflows the parser) is damage like any other: no traceback, step 1 resumes."""
    cfg = copy_run(finished_run, tmp_path / "run")
    out_dir = tmp_path / "run" / "out"
    target = out_dir / "checkpoints" / "global_step_2" / NESTED[where]
    assert target.exists(), sorted(p.name for p in target.parent.iterdir())
    _nested(target)
    code, out, err = cli("train", str(cfg), "--no-progress", "trainer.total_training_steps=3")
    rows = read_metrics(out_dir)
    ok = code == 0 and "(step 1)" in out and "Traceback" not in err and [r["step"] for r in rows] == [1, 2, 3]
    tally.record("malicious", f"deeply nested JSON in a checkpoint's {where}", ok)
    assert ok, out + err
