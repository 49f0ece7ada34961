"""User mistakes end in a message, and outputs already written are never damaged (issue 11, items 4, 6)."""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil

import pytest
from rl_core.checkpoints.store import CheckpointManager

from tests.reliability import tally
from tests.reliability.runs import cli, copy_run, make_run, read_metrics, set_config

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
pytest.importorskip("rl_train_fsdp", reason="needs the rl-train-fsdp plugin (pip install -e plugins/train_fsdp)")


def _clear(code, err, *words):
    return code == 1 and "Traceback" not in err and all(w in err for w in words)


# ------------------------------------------------------------- user errors
def _scorer_raises(tmp_path, cfg):
    (tmp_path / "reward.py").write_text("def compute_score(solution_str, **kw):\n    return {}['missing']\n")
    return [], ["reward", "failed on sample", "KeyError"]


def _scorer_file_missing(tmp_path, cfg):
    return [f"reward.custom.path={tmp_path / 'nope.py'}"], ["nope.py"]


def _logger_not_installed(tmp_path, cfg):
    import sys

    sys.modules["wandb"] = None  # import fails, as when wandb is not installed (restored by the test)
    return ["trainer.loggers=[jsonl,wandb]"], ["wandb", "pip install wandb"]


def _output_dir_is_a_file(tmp_path, cfg):
    (tmp_path / "afile").write_text("x")
    return [f"trainer.output_dir={tmp_path / 'afile' / 'out'}"], ["trainer.output_dir", "afile"]


def _cuda_without_gpu(tmp_path, cfg):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    return ["trainer.device=cuda"], ["trainer.device", "cuda"]


USER_ERRORS = {
    "scorer raises": _scorer_raises,
    "reward file missing": _scorer_file_missing,
    "logger not installed": _logger_not_installed,
    "output dir under a file": _output_dir_is_a_file,
    "CUDA requested without a GPU": _cuda_without_gpu,
}


@pytest.mark.parametrize("case", sorted(USER_ERRORS))
def test_user_error_is_a_message_without_traceback(tmp_path, monkeypatch, case):
    import sys

    monkeypatch.setitem(sys.modules, "wandb", sys.modules.get("wandb"))  # undone after the test
    cfg = make_run(tmp_path)
    overrides, words = USER_ERRORS[case](tmp_path, cfg)
    code, out, err = cli("train", str(cfg), "--no-progress", *overrides)
    tally.record("user_errors", case, _clear(code, err, *words))
    assert code == 1, out + err
    assert "Traceback" not in err, err
    for w in words:
        assert w in err, (w, err)


def test_output_dir_without_write_permission(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root writes into read-only folders; covered by 'output dir under a file'")
    cfg = make_run(tmp_path)
    (tmp_path / "locked").mkdir(mode=0o500)
    code, out, err = cli("train", str(cfg), "--no-progress", f"trainer.output_dir={tmp_path / 'locked' / 'out'}")
    tally.record("user_errors", "output dir without write permission", _clear(code, err, "trainer.output_dir"))
    assert _clear(code, err, "trainer.output_dir"), err


# ---------------------------------------------------------- disk at save time
def _fail_save_at_step_2(monkeypatch, exc):
    from rl_core.placement.worker import HybridWorker

    original = HybridWorker.save_checkpoint

    def save_checkpoint(self, path):
        if path.split(os.sep)[-1].startswith(".tmp_global_step_2_"):
            os.makedirs(os.path.join(path, "actor"), exist_ok=True)
            with open(os.path.join(path, "actor", "partial.bin"), "wb") as f:
                f.write(b"\0" * 1000)  # some bytes made it to disk before the error
            raise exc
        return original(self, path)

    monkeypatch.setattr(HybridWorker, "save_checkpoint", save_checkpoint)


SAVE_FAULTS = {
    "disk full (ENOSPC)": OSError(errno.ENOSPC, "No space left on device"),
    "read-only output dir (EROFS)": OSError(errno.EROFS, "Read-only file system"),
    "no write permission (EACCES)": PermissionError(errno.EACCES, "Permission denied"),
}


@pytest.mark.parametrize("fault", sorted(SAVE_FAULTS))
def test_failed_save_is_clear_and_keeps_the_previous_checkpoint(finished_run, tmp_path, monkeypatch, fault):
    cfg = copy_run(finished_run, tmp_path / "run")
    out_dir = tmp_path / "run" / "out"
    root = out_dir / "checkpoints"
    shutil.rmtree(out_dir / "hf_final")  # as if the run had stopped after step 1
    shutil.rmtree(root / "global_step_2")
    _fail_save_at_step_2(monkeypatch, SAVE_FAULTS[fault])
    code, out, err = cli("train", str(cfg), "--no-progress", "trainer.total_training_steps=3")
    ckpt = CheckpointManager(str(root))
    left = sorted(os.listdir(root))
    ok = (
        _clear(code, err, "could not write the checkpoint of step 2", SAVE_FAULTS[fault].strerror, "global_step_1")
        and ckpt.verify(str(root / "global_step_1")) is None
        and not any(n.startswith(".tmp") for n in left)
        and not (out_dir / "hf_final").exists()
    )
    out2 = err2 = ""
    if ok:  # the rerun, once the disk is fine again, resumes from step 1
        monkeypatch.undo()
        code2, out2, err2 = cli("train", str(cfg), "--no-progress", "trainer.total_training_steps=3")
        ok = code2 == 0 and "(step 1)" in out2 and [r["step"] for r in read_metrics(out_dir)] == [1, 2, 3]
    tally.record("disk", fault, ok)
    assert ok, (err, left, out2, err2)


# ------------------------------------------------------------- existing outputs
def test_changed_config_asks_before_resuming(finished_run, tmp_path):
    cfg = copy_run(finished_run, tmp_path / "run")
    out_dir = tmp_path / "run" / "out"
    saved = (out_dir / "config.yaml").read_text()
    code, out, err = cli("train", str(cfg), "--no-progress", "trainer.total_training_steps=3", "actor.optim.lr=0.5")
    asked = _clear(code, err, "different config", "actor.optim.lr: 0.001 -> 0.5", "--resume-anyway", "trainer.output_dir")
    untouched = (out_dir / "config.yaml").read_text() == saved and [r["step"] for r in read_metrics(out_dir)] == [1, 2]
    code2, out2, err2 = cli("train", str(cfg), "--no-progress", "trainer.total_training_steps=3", "actor.optim.lr=0.5", "--resume-anyway")
    resumed = code2 == 0 and "(step 2)" in out2 and "actor.optim.lr" in out2 and "lr: 0.5" in (out_dir / "config.yaml").read_text()
    tally.record("user_errors", "rerun with a changed config", asked and untouched and resumed)
    assert asked, err
    assert untouched
    assert resumed, out2 + err2


def test_resume_false_never_starts_over_on_a_run_with_checkpoints(finished_run, tmp_path):
    """trainer.resume=false in a folder holding checkpoints is refused: a fresh start would rotate them away."""
    cfg = copy_run(finished_run, tmp_path / "run")
    out_dir = tmp_path / "run" / "out"
    before = {p.relative_to(out_dir): p.read_bytes() for p in out_dir.rglob("*") if p.is_file()}
    code, out, err = cli("train", str(cfg), "--no-progress", "trainer.resume=false")
    asked = _clear(code, err, "trainer.resume", "checkpoints", "another folder", "step 2")
    code, out, check_err = cli("check", str(cfg), "trainer.resume=false")  # rlcore check says the same
    asked = asked and _clear(code, check_err, "trainer.resume: is false", "step 2")
    after = {p.relative_to(out_dir): p.read_bytes() for p in out_dir.rglob("*") if p.is_file()}
    untouched = after == before
    tally.record("user_errors", "trainer.resume=false on a run with checkpoints", asked and untouched)
    assert asked, err
    assert untouched, sorted(set(after) ^ set(before))


def test_failed_start_leaves_the_previous_config_alone(finished_run, tmp_path):
    cfg = copy_run(finished_run, tmp_path / "run")
    out_dir = tmp_path / "run" / "out"
    saved = (out_dir / "config.yaml").read_text()
    code, out, err = cli("train", str(cfg), "--no-progress", f"data.train_files=[{tmp_path / 'missing.jsonl'}]", "--resume-anyway")
    assert code == 1 and "missing.jsonl" in err, err
    assert (out_dir / "config.yaml").read_text() == saved


def test_crash_before_the_first_checkpoint_leaves_no_duplicate_rows(tmp_path, caplog):
    cfg = make_run(tmp_path)
    set_config(cfg, trainer__total_training_steps=2, trainer__save_freq=-1)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    # what a run killed after logging step 1 (and before any checkpoint) leaves behind
    (out_dir / "metrics.jsonl").write_text(json.dumps({"step": 1, "time": 0, "reward/mean": 0.5}) + "\n")
    with caplog.at_level(logging.INFO):
        code, out, err = cli("train", str(cfg), "--no-progress")
    assert code == 0, out + err
    rows = read_metrics(out_dir)
    assert [r["step"] for r in rows] == [1, 2] and rows[0]["time"] != 0
    (aside,) = out_dir.glob("metrics.dropped-*.jsonl")  # the killed run's row, kept
    assert [(r["step"], r["time"]) for r in map(json.loads, aside.read_text().splitlines())] == [(1, 0)]
