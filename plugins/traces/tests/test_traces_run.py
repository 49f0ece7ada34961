"""Traces of real tiny runs (the random tiny model, the hf rollout, the fsdp trainer): every step and validation
written by the controller, a resumed run continues them without duplicates or gaps, they add at most 10% to the
output folder, ``rlcore traces`` writes the page and an export; a quickstart-shaped run's traces against the
quickstart's own output folder; the options checked by ``rlcore check``."""

from __future__ import annotations

import contextlib
import io
import shutil
from pathlib import Path

import pytest
from rl_core.config.load import load_config
from rl_memory_estimate.disk import estimate_disk
from rl_core_testing.tiny_model import build_tokenizer
from rl_core_testing.tiny_run import read_metrics, write_tiny_run
from rl_traces.options import TracesOptions
from rl_traces.reader import Traces
from rl_traces.synthetic import synthetic_rollouts
from rl_traces.writer import TraceWriter

REPO = Path(__file__).resolve().parents[3]


def cli(*argv: str) -> tuple[int, str, str]:
    from rl_core.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return code, out.getvalue(), err.getvalue()


def _size(folder: Path, skip: str | None = None) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not (skip and skip in p.parts))


def test_a_run_writes_resumes_and_pages_its_traces(tmp_path):
    cfg = write_tiny_run(tmp_path, steps=3, **{"trainer.test_freq": 2, "trainer.save_freq": 1, "trainer.max_ckpt_to_keep": 3,
                                               "rollout.calculate_log_probs": True})
    code, out, err = cli("train", str(cfg), "--no-progress")
    assert code == 0, err
    run = tmp_path / "out"
    t = Traces(run)
    assert t.steps("train") == [1, 2, 3] and t.steps("val") == [0, 2, 3]
    metrics = {m["step"]: m for m in read_metrics(run)}
    for s in (1, 2, 3):
        rows = t.read("train", s).to_pylist()
        assert len(rows) == 8 and {r["step"] for r in rows} == {s}  # 4 prompts x 2 samples, all kept
        assert sum(r["reward"] for r in rows) / 8 == pytest.approx(metrics[s]["reward/mean"], abs=1e-5)
        assert all(r["policy_version"] == s - 1 for r in rows)
        assert all(r["logprob_gap"] is not None and r["logprob_gap"] >= 0 for r in rows)  # rollout vs the old-log-prob pass
        assert len({r["group"] for r in rows}) == 4
    assert len(t.read("val", 2)) == 4
    # disk: the traces add at most 10% to the run's output folder
    traces, total = _size(run / "traces"), _size(run)
    assert traces <= 0.10 * (total - traces), (traces, total)

    # a crash after step 3 whose last checkpoint is step 2: the rerun (to step 4) continues the traces from step 2
    before = {s: t.read("train", s).to_pylist() for s in (1, 2)}
    shutil.rmtree(run / "checkpoints" / "global_step_3")
    (run / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("2")
    shutil.rmtree(run / "hf_final")
    # (the traces' options may change on a resume: they read the run, never change it)
    code, out, err = cli("train", str(cfg), "--no-progress", "trainer.total_training_steps=4", "trainer.observers.traces.token_limit=4")
    assert code == 0, err
    assert "resumed from" in out + err
    assert t.steps("train") == [1, 2, 3, 4] and t.steps("val") == [0, 2, 4]
    for s in (1, 2, 3, 4):
        steps = t.read("train", s, ["step"]).column("step").to_pylist()
        assert steps == [s] * 8
    assert max(len(x) for x in t.read("train", 4, ["tokens"]).column("tokens").to_pylist()) == 4
    assert {s: t.read("train", s).to_pylist() for s in (1, 2)} == before  # the kept steps untouched

    # the page and an export
    code, out, err = cli("traces", str(run))
    assert code == 0, err
    page = Path(out.strip())
    assert page == run / "traces.html" and page.stat().st_size > 1000
    code, out, err = cli("traces", str(run), "--export", "4", "--out", str(tmp_path / "step4.jsonl"))
    assert code == 0, err
    assert len((tmp_path / "step4.jsonl").read_text().splitlines()) == 8
    code, out, err = cli("traces", str(tmp_path))
    assert code == 1 and "no traces under" in err


def test_quickstart_shaped_traces_are_under_10_percent_of_its_output(tmp_path):
    """The quickstart's 50 steps (8 prompts x 4 samples, 16 tokens) and its 6 validations of 100 prompts, through
    the writer, against the quickstart's output folder as its config makes it: hf_final (rl_memory_estimate.disk's
    estimate; it saves no checkpoint). A real 50-step quickstart run is tens of minutes on this CPU."""
    config = load_config(str(REPO / "examples" / "quickstart.yaml"))
    final = estimate_disk(config).final_model
    tok = build_tokenizer()
    w = TraceWriter(tmp_path / "traces", TracesOptions())
    w.on_start(0)
    for step in range(0, 51):
        if step:
            w.on_rollouts(synthetic_rollouts(step, tok))
        if step % config.trainer.test_freq == 0:
            w.on_rollouts(synthetic_rollouts(step, tok, phase="val", groups=100, n=1))
        w.on_step_end(step)
    traces = _size(tmp_path / "traces")
    assert traces <= 0.10 * final, (traces, final)


def test_options_are_checked(tmp_path):
    cfg = write_tiny_run(tmp_path)
    code, out, err = cli("check", str(cfg), "--skip-device-check", "trainer.observers.traces.shares_after_budget=0.5",
                         "trainer.observers.trace.enable=false")
    text = out + err
    assert code != 0
    assert "trainer.observers.traces.shares_after_budget" in text and "share_after_budget" in text  # did you mean
    assert "trainer.observers.trace" in text and "traces" in text
    code, out, err = cli("check", str(cfg), "--skip-device-check", "trainer.observers.traces.budget_mb=-1")
    assert code != 0 and "trainer.observers.traces" in out + err and "budget_mb" in out + err
    code, out, err = cli("check", str(cfg), "--skip-device-check", "trainer.observers.traces.enable=false")
    assert code == 0, out + err
