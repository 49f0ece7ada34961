"""Resume after kill -9 gives the same metrics as an uninterrupted run; half-written checkpoints are ignored."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.e2e.helpers import read_metrics, write_tiny_run
from tests.reliability.cli_child import run_cli

pytest.importorskip("rl_train_fsdp", reason="needs the rl-train-fsdp plugin (pip install -e plugins/train_fsdp)")

STEPS = 4
NON_TIMING = lambda row: {k: v for k, v in row.items() if not k.startswith(("timing_s/", "perf/throughput"))}  # noqa: E731


def _train(ctx, cfg: Path, *overrides: str):
    """`rlcore train` in a child of the forkserver (torch & co. imported once); its output goes to ``cfg``'s folder."""
    log = cfg.parent / f"train{len(list(cfg.parent.glob('train*.log')))}.log"
    proc = ctx.Process(target=run_cli, args=(["train", str(cfg), "--no-progress", *overrides], str(log)))
    proc.start()
    proc.log = log
    return proc


def _run_to_end(ctx, cfg: Path, *overrides: str) -> str:
    proc = _train(ctx, cfg, *overrides)
    proc.join(600)
    if proc.is_alive():  # a hang: every thread's stack into the log (rlcore's SIGUSR1), then the kill
        os.kill(proc.pid, signal.SIGUSR1)
        time.sleep(3)
        proc.kill()
        proc.join()
    out = proc.log.read_text()
    assert proc.exitcode == 0, out[-5000:]
    return out


@pytest.mark.slow
def test_kill_and_resume_matches_uninterrupted(rlcore_forkserver, tmp_path):
    ctx = rlcore_forkserver
    common = [f"trainer.total_training_steps={STEPS}", "trainer.save_freq=2", "trainer.loggers=[jsonl]"]
    ref_cfg = write_tiny_run(tmp_path / "ref")
    _run_to_end(ctx, ref_cfg, *common)
    reference = read_metrics(tmp_path / "ref" / "out")
    assert [r["step"] for r in reference] == list(range(1, STEPS + 1))

    cfg = write_tiny_run(tmp_path / "killed")
    ckpt_root = tmp_path / "killed" / "out" / "checkpoints"
    proc = _train(ctx, cfg, *common)
    deadline = time.time() + 300
    while not (ckpt_root / "global_step_2").exists():
        assert proc.is_alive(), proc.log.read_text()[-5000:]
        assert time.time() < deadline, "no checkpoint within 300 s"
        time.sleep(0.05)
    proc.kill()  # SIGKILL
    proc.join()
    out = _run_to_end(ctx, cfg, *common)
    assert "resumed from" in out and "(step 2)" in out, out
    resumed = read_metrics(tmp_path / "killed" / "out")
    assert [r["step"] for r in resumed] == list(range(1, STEPS + 1)), "metrics rows after the checkpoint must be replaced, not duplicated"
    for a, b in zip(reference[2:], resumed[2:]):
        a, b = NON_TIMING(a), NON_TIMING(b)
        assert a.keys() == b.keys()
        for k in a:
            assert a[k] == pytest.approx(b[k], rel=1e-6, abs=1e-7), k


@pytest.mark.slow
def test_half_written_checkpoint_is_ignored_with_a_warning(rlcore_forkserver, tmp_path):
    ctx = rlcore_forkserver
    # also trainer.save_contents (verl's checkpoint.save_contents): no optimizer state, an HF folder in each checkpoint
    common = ["trainer.save_freq=1", "trainer.loggers=[jsonl]", "trainer.save_contents=[model,extra,hf_model]"]
    cfg = write_tiny_run(tmp_path)
    _run_to_end(ctx, cfg, "trainer.total_training_steps=1", *common)
    root = tmp_path / "out" / "checkpoints"
    assert (root / "global_step_1").is_dir()
    assert (root / "global_step_1" / "hf" / "config.json").is_file()
    # A crash while saving step 2: the temporary folder exists, nothing was renamed into place,
    # and a folder without the completion marker lies beside it.
    (root / ".tmp_global_step_2_12345" / "actor").mkdir(parents=True)
    (root / "global_step_3").mkdir()
    (root / "global_step_3" / "junk.bin").write_bytes(b"\0" * 10)
    out = _run_to_end(ctx, cfg, "trainer.total_training_steps=2", *common)
    assert "resumed from" in out and "(step 1)" in out, out
    assert "resuming without the checkpoint's optimizer" in out and "AdamW starts from a fresh state" in out, out
    assert "global_step_3" in out  # the warning names the incomplete checkpoint
    rows = read_metrics(tmp_path / "out")
    assert [r["step"] for r in rows] == [1, 2]
