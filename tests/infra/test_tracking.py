"""Tracker: jsonl records and truncation, console line, a tracker card's logger, errors (tensorboard / wandb: plugins/tracking)."""

import json

import numpy as np
import pytest
import torch
from rl_core.trainer.progress import ProgressBar
from rl_core.trainer.tracking import (
    Tracker,
    find_key_metric,
    key_metrics,
    read_jsonl_metrics,
)


def _rows(path):
    return [json.loads(line) for line in open(path)]


def test_jsonl_appends_one_row_per_step_and_converts_values(tmp_path):
    with Tracker(["jsonl"], str(tmp_path), "p", "e", {}) as tr:
        tr.log({"critic/score/mean": torch.tensor(0.5), "actor/lr": np.float32(1e-5)}, step=1)
        # flushed each step: readable before close
        assert _rows(tmp_path / "metrics.jsonl")[0]["critic/score/mean"] == 0.5
        tr.log({"critic/score/mean": 0.75, "actor/kl": float("nan")}, step=2)
    rows = _rows(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    assert rows[0]["actor/lr"] == pytest.approx(1e-5)
    assert rows[1]["actor/kl"] is None  # NaN is not JSON
    # a second tracker (a resumed run) appends
    with Tracker(["jsonl"], str(tmp_path)) as tr:
        tr.log({"x": 1}, step=3)
    assert [r["step"] for r in _rows(tmp_path / "metrics.jsonl")] == [1, 2, 3]


def test_truncate_after_drops_later_rows_and_a_torn_line(tmp_path):
    with Tracker(["jsonl"], str(tmp_path)) as tr:
        for step in range(1, 6):
            tr.log({"reward/mean": step / 10}, step=step)
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"step": 6, "rew')  # the crash happened mid-write
    with Tracker(["jsonl"], str(tmp_path)) as tr:
        assert tr.truncate_after(3) == 2
        tr.log({"reward/mean": 0.99}, step=4)
    rows = read_jsonl_metrics(str(tmp_path / "metrics.jsonl"))
    assert [(r["step"], r["reward/mean"]) for r in rows] == [(1, 0.1), (2, 0.2), (3, 0.3), (4, 0.99)]
    # the dropped rows were moved aside, not lost (the torn line is unreadable and stays out)
    (aside,) = tmp_path.glob("metrics.dropped-*.jsonl")
    assert [(r["step"], r["reward/mean"]) for r in read_jsonl_metrics(str(aside))] == [(4, 0.4), (5, 0.5)]


def test_fresh_start_keeps_an_earlier_runs_metrics(tmp_path):
    with Tracker(["jsonl"], str(tmp_path)) as tr:
        tr.log({"reward/mean": 0.5}, step=1)
    with Tracker(["jsonl"], str(tmp_path)) as tr:
        assert tr.truncate_after(-1) == 1  # what the trainer does when it starts at step 0
    assert read_jsonl_metrics(str(tmp_path / "metrics.jsonl")) == []
    (aside,) = tmp_path.glob("metrics.dropped-*.jsonl")
    assert [r["reward/mean"] for r in read_jsonl_metrics(str(aside))] == [0.5]
    assert not list(tmp_path.glob("*.tmp*"))


def test_console_shows_key_metrics(tmp_path):
    lines = []
    tr = Tracker(["console"], str(tmp_path), print_fn=lines.append)
    tr.log({"critic/score/mean": 0.5, "critic/score/max": 1.0, "response_length/mean": 17.0,
            "timing_s/step": 3.2, "timing_s/reward": 0.1, "other": 4.0}, step=7)
    tr.close()
    assert lines == ["step 7 | reward 0.5 | len 17 | s/step 3.2"]


def test_key_metric_names_follow_common_conventions():
    names = ["val-core/gsm8k/reward/mean@1", "critic/rewards/mean", "critic/score/mean", "timing_s/reward",
             "actor/entropy", "actor/ppo_kl", "actor/grad_norm", "actor/lr", "response_length/mean"]
    assert find_key_metric(names, "reward") == "critic/rewards/mean"
    assert find_key_metric(names, "validation") == "val-core/gsm8k/reward/mean@1"
    assert find_key_metric(names, "kl") == "actor/ppo_kl"
    assert find_key_metric(names, "lr") == "actor/lr"
    assert find_key_metric(names, "step_time") is None
    assert key_metrics({"actor/grad_norm": 2.0}) == {"gnorm": 2.0}


def test_bad_logger_names_and_values(tmp_path):
    with pytest.raises(ValueError, match=r"unknown logger\(s\) \['mlflow'\].*allowed: \['console', 'jsonl'\].*pip install rl-tracking"):
        Tracker(["jsonl", "mlflow"], str(tmp_path))
    # a tracker card's factory (Plan.trackers) makes its name known
    logged = []

    class Recorder:
        def __init__(self, **_):
            pass

        def log(self, metrics, step):
            logged.append((step, metrics))

        def close(self):
            logged.append("closed")

    with Tracker(["jsonl", "mine"], str(tmp_path), trackers=(("mine", Recorder),)) as tr:
        tr.log({"x": np.float32(2.0)}, step=4)
    assert logged == [(4, {"x": 2.0}), "closed"]
    with Tracker(["jsonl"], str(tmp_path)) as tr:
        with pytest.raises(TypeError, match="metric 'note' must be a number"):
            tr.log({"note": "hello"}, step=1)


def test_progress_bar_counts_steps(capsys):
    bar = ProgressBar(total=10, initial=2, enable=True)
    bar.update(3, {"critic/score/mean": 0.25, "timing_s/step": 1.5})
    bar.update(5)
    assert bar._bar.n == 5
    assert "reward" in str(bar._bar.postfix)
    bar.close()
    quiet = ProgressBar(total=10, enable=False)
    quiet.update(1, {"reward/mean": 1.0})
    quiet.close()
    assert quiet._bar.disable
