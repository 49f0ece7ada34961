"""A stuck in-process scorer times out; runs that learn nothing say so (issue 11, item 6 of the issue)."""

from __future__ import annotations

import logging
import time

import pytest

from tests.reliability import tally
from tests.reliability.runs import cli, make_run, read_metrics, set_config

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
pytest.importorskip("rl_train_fsdp", reason="needs the rl-train-fsdp plugin (pip install -e plugins/train_fsdp)")

HANGS = "def compute_score(**kw):\n    while True:\n        pass\n"


def test_stuck_in_process_scorer_times_out_and_the_run_says_it_learns_nothing(tmp_path, caplog):
    cfg = make_run(tmp_path)
    (tmp_path / "reward.py").write_text(HANGS)
    set_config(cfg, trainer__total_training_steps=3, reward__num_workers=0, reward__timeout_s=0.2)
    start = time.monotonic()
    with caplog.at_level(logging.WARNING):
        code, out, err = cli("train", str(cfg), "--no-progress")
    took = time.monotonic() - start
    rows = read_metrics(tmp_path / "out")
    assert code == 0, out + err
    assert [r["reward/timeouts"] for r in rows] == [4.0, 4.0, 4.0]  # 2 prompts x 2 samples, every one timed out
    assert [r["reward/all_failed"] for r in rows] == [1.0, 1.0, 1.0]
    assert [r["critic/advantages_all_zero"] for r in rows] == [1.0, 1.0, 1.0]
    assert "every one of the 4 rewards failed (4 timeouts, 0 errors)" in caplog.text
    assert "advantages have been all zero for 3 steps" in caplog.text
    assert took < 600  # it did not hang (12 scorer calls x 0.2 s)


def test_in_process_timeout_unit(tmp_path):
    """RewardManager with num_workers=0: the stuck sample is a timeout, the others score."""
    import torch
    from rl_core.batch import Batch
    from rl_core.config.schema import CustomRewardConfig, RewardConfig
    from rl_core.rewards.manager import RewardManager

    path = tmp_path / "r.py"
    path.write_text("def compute_score(solution_str, **kw):\n    while solution_str == 'stuck':\n        pass\n    return 1.0\n")
    cfg = RewardConfig(custom=CustomRewardConfig(path=str(path), name="compute_score"), num_workers=0, timeout_s=0.3)
    batch = Batch({"x": torch.zeros(3, 1)}, {"response_text": ["a", "stuck", "b"], "data_source": ["d"] * 3})
    from rl_core.plugins import get_registry

    with RewardManager(cfg, get_registry()) as rm:
        scores, metrics, extras = rm.score(batch)
    ok = scores.tolist() == [1.0, 0.0, 1.0] and metrics["reward/timeouts"] == 1.0 and extras[1].get("reward_timeout")
    tally.record("user_errors", "stuck in-process scorer (reward.num_workers=0) times out", bool(ok))
    assert ok, (scores, metrics, extras)
