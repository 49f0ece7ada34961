"""SIGINT / SIGTERM to a running `rlcore train`: one clear line, exit 128 + signal, workers stopped, nothing lost.

Runs start from a forkserver that imported torch, transformers and rl-core once (as in test_kill_resume),
so each case costs its steps. A first signal during training lets the step finish and saves it (even with
``trainer.save_freq=-1``, before any scheduled checkpoint), and the same command resumes; a second one stops at
once and says what was kept and how to keep more (``trainer.save_freq``).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.reliability import tally
from tests.reliability.cli_child import run_cli as _child
from tests.reliability.runs import make_run, set_config

pytest.importorskip("rl_train_fsdp", reason="needs the rl-train-fsdp plugin (pip install -e plugins/train_fsdp)")


@pytest.fixture(scope="module")
def ctx(rlcore_forkserver):
    return rlcore_forkserver


def _rows(out: Path) -> int:
    try:
        return sum(1 for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip())
    except FileNotFoundError:
        return 0


def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _run_and_signal(ctx, tmp: Path, signals: list[int], *, nprocs: int = 1, to_workers: bool = False):
    """Start a long run, wait for its first logged step, send ``signals``; (exit code, log text, worker pids)."""
    cfg = make_run(tmp, nprocs=nprocs)
    set_config(cfg, trainer__total_training_steps=200)  # far more than the test waits for
    log = tmp / "run.log"
    p = ctx.Process(target=_child, args=(["train", str(cfg), "--no-progress"], str(log)))
    p.start()
    deadline = time.monotonic() + 240
    while _rows(tmp / "out") < 1 and p.is_alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert p.is_alive(), log.read_text()[-3000:]
    workers = _children(p.pid)
    for s in signals:
        if to_workers:  # a terminal's Ctrl-C reaches every process of the foreground group
            for w in workers:
                os.kill(w, s)
        os.kill(p.pid, s)
    p.join(120)
    if p.is_alive():
        p.kill()
        p.join()
        pytest.fail("the run did not stop within 120 s of the signal")
    return p.exitcode, log.read_text(), workers, cfg


@pytest.mark.dist
def test_sigint_saves_the_step_and_the_same_command_resumes(ctx, tmp_path):
    code, text, _, cfg = _run_and_signal(ctx, tmp_path, [signal.SIGINT])
    ckpts = sorted((tmp_path / "out" / "checkpoints").glob("global_step_*"))
    ok = code == 130 and "Traceback" not in text and "run the same command to resume" in text and len(ckpts) == 1
    tally.record("signals", "SIGINT, 1 rank, save_freq=-1, before any checkpoint", ok)
    assert code == 130, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    assert "SIGINT: stopping after the current step" in text
    step = int(ckpts[0].name.rsplit("_", 1)[1]) if ckpts else None
    assert ckpts and f"stopped by SIGINT after step {step} of 200: saved {ckpts[0]}" in text, text[-2000:]
    # the kept checkpoint's size (its files on disk) and how to free it (issue 56)
    size = sum(f.stat().st_size for f in ckpts[0].rglob("*") if f.is_file() and not f.is_symlink())
    shown = f"{size / 1e9:.2f} GB" if size >= 1e8 else f"{size / 1e6:.1f} MB"
    assert f"saved {ckpts[0]} ({shown} on disk; `rlcore clean {tmp_path / 'out'}` removes it" in text, text[-2000:]
    # the same command resumes from it
    set_config(cfg, trainer__total_training_steps=step + 1)
    from tests.reliability.runs import cli

    code2, out2, err2 = cli("train", str(cfg), "--no-progress")
    assert code2 == 0 and f"(step {step})" in out2, out2 + err2


@pytest.mark.dist
def test_sigterm_to_a_two_rank_run_stops_every_worker(ctx, tmp_path):
    code, text, workers, _ = _run_and_signal(ctx, tmp_path, [signal.SIGTERM], nprocs=2, to_workers=True)
    deadline = time.monotonic() + 15  # workers exit right after the controller; allow a loaded machine some slack
    left = [w for w in workers if _alive(w)]
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = [w for w in workers if _alive(w)]
    ok = code == 143 and "Traceback" not in text and not left and len(workers) == 2
    tally.record("signals", "SIGTERM to controller and workers, 2 ranks", ok)
    assert len(workers) == 2, workers
    assert code == 143, text[-3000:]
    assert "Traceback" not in text and "stopped by SIGTERM after step" in text, text[-3000:]
    assert not left, f"workers still running: {left}"


@pytest.mark.dist
def test_a_second_signal_stops_at_once_and_says_nothing_was_saved(ctx, tmp_path):
    code, text, _, _ = _run_and_signal(ctx, tmp_path, [signal.SIGINT, signal.SIGTERM])
    ckpts = list((tmp_path / "out" / "checkpoints").glob("global_step_*")) if (tmp_path / "out" / "checkpoints").exists() else []
    tmp_left = [p for p in (tmp_path / "out" / "checkpoints").glob("*")] if not ckpts and (tmp_path / "out" / "checkpoints").exists() else []
    if ckpts:  # the step had finished and its save completed before the second signal was handled
        ok = code == 143 and "run the same command to resume" in text
    else:
        ok = code == 143 and "nothing was saved" in text and "trainer.save_freq" in text and not tmp_left
    ok = ok and "Traceback" not in text
    tally.record("signals", "SIGINT then SIGTERM, 1 rank", ok)
    assert code == 143, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    if not ckpts:
        assert "nothing was saved" in text and "trainer.save_freq" in text, text[-2000:]
        assert not tmp_left, f"a half-written checkpoint stayed behind: {tmp_left}"


def test_a_signal_while_starting_is_one_line(monkeypatch, capsys):
    """Loading the config / resolving the stack: SIGTERM gives the same kind of line and exit 143."""
    from rl_core.cli import train_cmd

    def slow_start(args):
        os.kill(os.getpid(), signal.SIGTERM)  # arrives while `rlcore train` is still resolving
        time.sleep(5)
        return 0

    before = signal.getsignal(signal.SIGTERM)
    monkeypatch.setattr(train_cmd, "run", slow_start)
    code = train_cmd.run_stoppable(None)
    err = capsys.readouterr().err
    ok = code == 143 and "stopped by SIGTERM while starting: nothing was trained or saved" in err
    tally.record("signals", "SIGTERM while starting", ok)
    assert ok, err
    assert signal.getsignal(signal.SIGTERM) is before  # the handlers are put back
