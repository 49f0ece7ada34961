"""Resume under a changed config (issue 27, item 3) and one run per output folder (item 4)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from rl_core.trainer.outputs import LOCK_FILE, OutputDirError, output_lock

from tests.reliability import tally
from tests.reliability.runs import cli, copy_run, read_metrics

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _clear(code, err, *needles):
    return code == 1 and "Traceback" not in err and all(n in err for n in needles)


# ------------------------------------------------------------ changed config on resume
def test_resume_anyway_trains_with_the_new_lr(finished_run, tmp_path):
    """--resume-anyway with a new actor.optim.lr prints it and the resumed step really uses it (the bug: old lr)."""
    cfg = copy_run(finished_run, tmp_path / "run")
    code, out, err = cli("train", str(cfg), "--no-progress", "trainer.total_training_steps=3", "actor.optim.lr=0.02", "--resume-anyway")
    rows = read_metrics(tmp_path / "run" / "out")
    lrs = [r["actor/lr"] for r in rows]
    ok = code == 0 and "actor.optim.lr: 0.001 -> 0.02" in out and lrs == [0.001, 0.001, 0.02]
    tally.record("user_errors", "--resume-anyway with a new lr trains at the new lr", ok)
    assert ok, (lrs, out[-2000:], err[-2000:])


def test_changed_config_is_caught_without_config_yaml(finished_run, tmp_path):
    """The config inside the checkpoint is what counts: deleting config.yaml changes nothing."""
    cfg = copy_run(finished_run, tmp_path / "run")
    (tmp_path / "run" / "out" / "config.yaml").unlink()
    code, out, err = cli("train", str(cfg), "--no-progress", "trainer.total_training_steps=3", "actor.optim.lr=0.5")
    ok = _clear(code, err, "different config", "actor.optim.lr: 0.001 -> 0.5", "run_config.json", "--resume-anyway")
    tally.record("user_errors", "changed config with config.yaml deleted", ok)
    assert ok, err


def test_changes_a_checkpoint_fixes_are_refused_even_with_resume_anyway(finished_run, tmp_path):
    cfg = copy_run(finished_run, tmp_path / "run")
    out_dir = tmp_path / "run" / "out"
    before = read_metrics(out_dir)
    code, out, err = cli(
        "train", str(cfg), "--no-progress", "trainer.total_training_steps=3", "trainer.seed=3", "actor.optim.lr=0.5", "--resume-anyway"
    )
    ok = _clear(code, err, "cannot take effect on resume", "trainer.seed: 7 -> 3", "random state") and "actor.optim.lr" not in err.split("resume:")[-1]
    ok = ok and read_metrics(out_dir) == before
    tally.record("user_errors", "--resume-anyway with a new trainer.seed (fixed by the checkpoint)", ok)
    assert ok, err


# ------------------------------------------------------------ one run per output folder
_HOLDER = """
import sys, time
from rl_core.trainer.outputs import output_lock
with output_lock(sys.argv[1]):
    print("locked", flush=True)
    time.sleep(60)
"""


def _start_holder(out_dir):
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, str(out_dir)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_second_run_on_a_folder_is_refused_naming_the_first(finished_run, tmp_path):
    cfg = copy_run(finished_run, tmp_path / "run")
    out_dir = tmp_path / "run" / "out"
    before = (out_dir / "metrics.jsonl").read_bytes()
    holder = _start_holder(out_dir)
    try:
        code, out, err = cli("train", str(cfg), "--no-progress", "trainer.total_training_steps=3")
    finally:
        holder.kill()
        holder.wait()
    ok = _clear(code, err, "in use by another run", f"pid {holder.pid}", "another trainer.output_dir") and (out_dir / "metrics.jsonl").read_bytes() == before
    tally.record("user_errors", "a second run on a folder in use", ok)
    assert ok, err


def test_lock_of_a_dead_run_is_named_and_taken_over(tmp_path, capsys):
    holder = _start_holder(tmp_path)
    with pytest.raises(OutputDirError, match=f"pid {holder.pid}"):
        with output_lock(str(tmp_path)):
            pass
    os.kill(holder.pid, signal.SIGKILL)  # dies holding it: the record stays, the flock goes
    holder.wait()
    assert str(holder.pid) in (tmp_path / LOCK_FILE).read_text()
    with output_lock(str(tmp_path)):
        err = capsys.readouterr().err
        assert f"pid {holder.pid}" in err and "taking over" in err
        assert str(os.getpid()) in (tmp_path / LOCK_FILE).read_text()
    assert (tmp_path / LOCK_FILE).read_text() == ""  # a clean end leaves nothing to report
    with output_lock(str(tmp_path)):
        assert "taking over" not in capsys.readouterr().err
    tally.record("user_errors", "stale lock of a killed run", True)


def test_deleting_the_lock_file_does_not_let_a_second_run_in(tmp_path):
    """The lock is the folder's own (flock on the directory): removing .rlcore.lock during a run changes nothing."""
    holder = _start_holder(tmp_path)
    try:
        (tmp_path / LOCK_FILE).unlink()
        with pytest.raises(OutputDirError, match="in use by another run.*record .rlcore.lock was deleted"):
            with output_lock(str(tmp_path)):
                pass
    finally:
        holder.kill()
        holder.wait()
    with output_lock(str(tmp_path)):  # the holder is gone: the folder is free again
        pass
    tally.record("user_errors", "lock file deleted during a run", True)


def test_two_processes_never_hold_the_lock_together(tmp_path):
    """Two processes race for one folder: exactly one gets it at any time."""
    script = """
import sys, time
from rl_core.trainer.outputs import output_lock, OutputDirError
try:
    with output_lock(sys.argv[1]):
        print("got", flush=True); time.sleep(1.5)
except OutputDirError:
    print("refused", flush=True)
"""
    procs = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE, text=True) for _ in range(2)]
    outs = sorted(p.communicate(timeout=120)[0].strip() for p in procs)
    assert outs == ["got", "refused"], outs


def test_a_filesystem_without_locks_warns_and_runs(tmp_path, monkeypatch, capsys):
    """flock failing with ENOLCK (some network filesystems) is not 'in use by another run': a warning, and the run goes on."""
    import errno
    import fcntl

    def no_locks(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    with output_lock(str(tmp_path)):
        ran = True
    assert ran and "cannot lock files" in capsys.readouterr().err
