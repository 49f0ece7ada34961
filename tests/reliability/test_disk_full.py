"""A full disk at every write site: a clear error by cause, nothing half-written left, nothing lost (issue 27, item 5).

ENOSPC is simulated by patching the write functions (never by filling a disk).
"""

from __future__ import annotations

import errno
import os
import shutil

import pytest
from rl_core.checkpoints.store import CheckpointManager
from rl_core.trainer.outputs import OutputDirError, ensure_writable
from rl_core.trainer.tracking import JsonlLogger, LoggerError

from tests.reliability import tally
from tests.reliability.runs import cli, copy_run, make_run, read_metrics, set_config

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

ENOSPC = OSError(errno.ENOSPC, "No space left on device")


def _clear(code, err, *needles):
    return code == 1 and "Traceback" not in err and "ermission" not in err and all(n in err for n in needles)


def test_full_disk_inside_torchs_checkpoint_writer(finished_run, tmp_path, monkeypatch):
    """ENOSPC inside torch.distributed.checkpoint's writer (torch wraps it): CheckpointError, temp folder gone, step 1 intact."""
    from torch.distributed.checkpoint import FileSystemWriter

    cfg = copy_run(finished_run, tmp_path / "run")
    out_dir = tmp_path / "run" / "out"
    root = out_dir / "checkpoints"
    shutil.rmtree(out_dir / "hf_final")
    shutil.rmtree(root / "global_step_2")  # as if the run had stopped after step 1

    def write_data(self, plan, planner):
        with open(os.path.join(str(self.path), "__0_0.distcp"), "wb") as f:
            f.write(b"\0" * 4096)  # some bytes made it before the disk filled
        raise ENOSPC

    monkeypatch.setattr(FileSystemWriter, "write_data", write_data)
    code, out, err = cli("train", str(cfg), "--no-progress", "trainer.total_training_steps=3")
    left = sorted(os.listdir(root))
    ok = (
        _clear(code, err, "could not write the checkpoint of step 2", "is full", "No space left on device", "global_step_1", "intact")
        and not any(n.startswith(".") for n in left if n != "latest_checkpointed_iteration.txt")
        and CheckpointManager(str(root)).verify(str(root / "global_step_1")) is None
    )
    tally.record("disk", "disk full inside torch's DCP writer", ok)
    assert ok, (err[-3000:], left)


def test_rerun_on_a_full_disk_does_not_blame_permissions(tmp_path, monkeypatch):
    import builtins

    real_open = builtins.open

    def full_open(path, mode="r", *a, **k):
        if ".rl-core-write-test-" in str(path) and "w" in mode:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real_open(path, mode, *a, **k)

    monkeypatch.setattr(builtins, "open", full_open)
    with pytest.raises(OutputDirError) as info:
        ensure_writable(str(tmp_path))
    msg = str(info.value)
    ok = "is full" in msg and "ermission" not in msg and not any(p.name.startswith(".rl-core-write-test") for p in tmp_path.iterdir())
    tally.record("disk", "rerun on a full disk (the write probe)", ok)
    assert ok, msg


class _FillsUp:
    """A file whose writes stop half way with ENOSPC (what a full disk does to an append)."""

    def __init__(self, real):
        self.real = real

    def write(self, data):
        self.real.write(bytes(data[: len(data) // 2]))
        raise ENOSPC

    def __getattr__(self, name):
        return getattr(self.real, name)


def test_full_disk_while_appending_metrics(tmp_path):
    log = JsonlLogger(str(tmp_path))
    log.log({"x": 1.0}, step=1)
    before = (tmp_path / "metrics.jsonl").read_bytes()
    log._f = _FillsUp(log._f)
    with pytest.raises(LoggerError) as info:
        log.log({"x": 2.0}, step=2)
    log._f = log._f.real
    log.close()
    after = (tmp_path / "metrics.jsonl").read_bytes()
    msg = str(info.value)
    ok = after == before and "step 2" in msg and "is full" in msg and "ermission" not in msg and "rows before it are kept" in msg
    tally.record("disk", "disk full while appending metrics.jsonl", ok)
    assert ok, (msg, after)


def test_full_disk_at_hf_final_without_checkpoints_keeps_the_run(tmp_path, monkeypatch):
    """save_freq=-1: hf_final fails -> no half folder, the state is saved as a checkpoint, the rerun writes hf_final."""
    from rl_core.placement.worker import HybridWorker

    cfg = make_run(tmp_path)
    set_config(cfg, trainer__save_freq=-1, trainer__total_training_steps=1)
    original = HybridWorker.save_hf

    def save_hf(self, path):
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, "config.json"), "w") as f:
            f.write("{}")  # the folder was started before the disk filled
        raise ENOSPC

    monkeypatch.setattr(HybridWorker, "save_hf", save_hf)
    code, out, err = cli("train", str(cfg), "--no-progress")
    out_dir = tmp_path / "out"
    first = (
        _clear(code, err, "could not write the final model", "is full", "saved instead", "global_step_1")
        and not (out_dir / "hf_final").exists()
        and not (out_dir / ".hf_final.partial").exists()
    )
    monkeypatch.setattr(HybridWorker, "save_hf", original)
    code2, out2, err2 = cli("train", str(cfg), "--no-progress")
    ok = first and code2 == 0 and "(step 1)" in out2 and (out_dir / "hf_final" / "model.safetensors").exists()
    ok = ok and [r["step"] for r in read_metrics(out_dir)] == [1]
    tally.record("disk", "disk full at hf_final with save_freq=-1 (state kept, rerun finishes)", ok)
    assert first, err[-3000:]
    assert ok, (out2[-2000:], err2[-2000:])


def test_save_freq_minus_one_refuses_to_start_without_room(tmp_path, monkeypatch):
    import rl_core.trainer.saving as saving

    cfg = make_run(tmp_path)
    set_config(cfg, trainer__save_freq=-1, trainer__total_training_steps=1)
    monkeypatch.setattr(saving, "free_bytes", lambda path: 1000)
    code, out, err = cli("train", str(cfg), "--no-progress")
    ok = _clear(code, err, "trainer.save_freq=-1", "GiB free", "trainer.save_freq=N") and not (tmp_path / "out" / "metrics.jsonl").exists()
    tally.record("disk", "save_freq=-1 with less room than hf_final needs", ok)
    assert ok, err[-2000:]


def test_full_disk_while_plotting(finished_run, tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    run = tmp_path / "run"
    shutil.copytree(finished_run / "out", run, ignore=shutil.ignore_patterns("checkpoints", "hf_final"))

    def savefig(self, fname, *a, **k):
        with open(fname, "wb") as f:
            f.write(b"\x89PNG")
        raise ENOSPC

    monkeypatch.setattr(Figure, "savefig", savefig)
    code, out, err = cli("plot", str(run))
    plots = run / "plots"
    ok = _clear(code, err, "is full", ".png") and (not plots.exists() or not any(plots.iterdir()))
    tally.record("disk", "disk full while writing plots", ok)
    assert ok, (err, sorted(os.listdir(plots)) if plots.exists() else None)


def test_write_failure_names_the_cause():
    from rl_core.trainer.outputs import write_failure

    assert "is full" in write_failure(OSError(errno.EDQUOT, "Disk quota exceeded"), "/x", needed=2**30)
    assert "1.00 GiB needed" in write_failure(ENOSPC, "/x", needed=2**30)
    assert "Permission denied" in write_failure(PermissionError(errno.EACCES, "Permission denied"), "/x")
    assert "read-only" in write_failure(OSError(errno.EROFS, "Read-only file system"), "/x")
    # a worker's error arrives as text (multi-process runs): still a full disk
    assert "is full" in write_failure(RuntimeError("rank 0 failed in save_checkpoint: OSError: [Errno 28] No space left on device"), "/x")


def test_full_disk_at_metrics_without_checkpoints_saves_the_step(tmp_path, monkeypatch):
    """save_freq=-1 and metrics.jsonl cannot grow: no 'resume from the last checkpoint' (there is none): the step is
    saved as a checkpoint instead, the message says so, and the rerun resumes from it."""
    cfg = make_run(tmp_path)
    set_config(cfg, trainer__save_freq=-1, trainer__total_training_steps=2)
    original = JsonlLogger.log

    def log(self, row, step):
        if step == 2:
            self._f = _FillsUp(self._f)
            try:
                return original(self, row, step)
            finally:
                self._f = self._f.real
        return original(self, row, step)

    monkeypatch.setattr(JsonlLogger, "log", log)
    code, out, err = cli("train", str(cfg), "--no-progress")
    out_dir = tmp_path / "out"
    first = (
        _clear(code, err, "could not append step 2", "is full", "no checkpoint yet, so step 2 was saved as", "global_step_2")
        and "resumes from the last checkpoint" not in err
    )
    monkeypatch.setattr(JsonlLogger, "log", original)
    code2, out2, err2 = cli("train", str(cfg), "--no-progress")
    ok = first and code2 == 0 and "(step 2)" in out2 and (out_dir / "hf_final").exists()
    tally.record("disk", "disk full at metrics.jsonl with save_freq=-1 (step saved, message true)", ok)
    assert first, err[-3000:]
    assert ok, (out2[-2000:], err2[-2000:])


def test_a_checkpoint_exception_is_a_failed_save_not_a_signal(finished_run, tmp_path, monkeypatch):
    """torch's CheckpointException derives from BaseException: a writer error that is not an OSError used to pass
    through the save as if it were Ctrl-C (a raw torch traceback). Now: the save's clear error, step 1 intact."""
    from torch.distributed.checkpoint import FileSystemWriter

    cfg = copy_run(finished_run, tmp_path / "run")
    out_dir = tmp_path / "run" / "out"
    shutil.rmtree(out_dir / "hf_final")
    shutil.rmtree(out_dir / "checkpoints" / "global_step_2")

    def write_data(self, plan, planner):
        raise RuntimeError("quota exceeded on the storage backend")

    monkeypatch.setattr(FileSystemWriter, "write_data", write_data)
    code, out, err = cli("train", str(cfg), "--no-progress", "trainer.total_training_steps=3")
    ok = _clear(code, err, "could not write the checkpoint of step 2", "quota exceeded", "global_step_1", "intact")
    tally.record("disk", "torch CheckpointException (not an OSError) at a save", ok)
    assert ok, err[-3000:]
