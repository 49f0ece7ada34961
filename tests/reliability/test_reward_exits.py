"""A reward function cannot end the run: sys.exit, SystemExit, os._exit, KeyboardInterrupt are contained.

Each case scores a small batch through the RewardManager the trainer uses, in-process (``reward.num_workers=0``,
the default) and in the scorer pool, with ``reward.on_error`` raise (a RewardError naming the function, the sample
and what it did) and skip (the sample scores 0 and counts in ``reward/errors``; the others score normally).
"""

from __future__ import annotations

import os
import textwrap

import pytest
from rl_core.batch import Batch
from rl_core.config.schema import CustomRewardConfig, RewardConfig
from rl_core.plugins import get_registry
from rl_core.rewards.manager import RewardError, RewardManager
from rl_core.util.stopping import StopSignals  # as during training: a real Ctrl-C is never a KeyboardInterrupt there

from tests.reliability import tally

EXITS = {
    "sys.exit(0)": ("import sys; sys.exit(0)", "SystemExit(0)"),
    "raise SystemExit(3)": ("raise SystemExit(3)", "SystemExit(3)"),
    "os._exit(0)": ("import os; os._exit(0)", "os._exit(0)"),
    "KeyboardInterrupt": ("raise KeyboardInterrupt", "KeyboardInterrupt"),
    "exit inside try/except Exception": ("try:\n            import sys; sys.exit(1)\n        except Exception:\n            return 0.5", "SystemExit(1)"),
}


def _reward_file(tmp_path, body: str, *, batched: bool = False):
    path = tmp_path / "my_reward.py"
    if batched:
        path.write_text(textwrap.dedent(f"""
            def my_score(data_sources, solution_strs, ground_truths, extra_infos, **kw):
                if any(s == "bad" for s in solution_strs):
                    {body.splitlines()[0]}
                return [1.0 for _ in solution_strs]
        """))
    else:
        path.write_text(textwrap.dedent("""
            def my_score(data_source, solution_str, ground_truth, extra_info=None, **kw):
                if solution_str == "bad":
                    BODY
                return 1.0
        """).replace("BODY", body))
    return path


def _batch() -> Batch:
    return Batch({}, {"response_text": ["ok", "bad", "ok"], "data_source": ["s"] * 3, "ground_truth": ["x"] * 3})


CASES = [(name, workers) for name in EXITS for workers in (0, 1)]


@pytest.mark.parametrize("name,workers", CASES, ids=[f"{n}-{'pool' if w else 'in-process'}" for n, w in CASES])
def test_a_reward_function_that_exits_is_contained(tmp_path, name, workers):
    body, shown = EXITS[name]
    path = _reward_file(tmp_path, body)
    cfg = dict(custom=CustomRewardConfig(path=str(path), name="my_score"), num_workers=workers, timeout_s=30)
    pid = os.getpid()
    with StopSignals(), RewardManager(RewardConfig(on_error="raise", **cfg), get_registry()) as manager:
        with pytest.raises(RewardError) as info:
            manager.score(_batch())
    text = str(info.value)
    raised_ok = os.getpid() == pid and "sample 1" in text and "my_score" in text and shown in text
    with StopSignals(), RewardManager(RewardConfig(on_error="skip", **cfg), get_registry()) as manager:
        scores, metrics, extras = manager.score(_batch())
    skipped_ok = scores.tolist() == [1.0, 0.0, 1.0] and metrics.get("reward/errors", 0) > 0
    tally.record("reward_exits", f"{name}, {'pool' if workers else 'in-process'}", raised_ok and skipped_ok)
    assert "sample 1" in text and "my_score" in text and shown in text, text
    assert "may not end the run" in text, text
    assert scores.tolist() == [1.0, 0.0, 1.0], (scores, metrics)
    assert metrics.get("reward/errors", 0) > 0, metrics


def test_a_batched_reward_that_exits_is_contained(tmp_path):
    from rl_core.cards import Provider, RewardCard
    from rl_core.plugins import Registry

    _reward_file(tmp_path, "import sys; sys.exit(0)", batched=True)
    import sys

    sys.path.insert(0, str(tmp_path))
    try:
        registry = Registry()
        registry.add(RewardCard(name="b", factory="my_reward:my_score", batched=True), Provider(distribution="t", version="0", entry_point="t"))
        with pytest.raises(RewardError) as info:
            RewardManager(RewardConfig(name="b"), registry).score(_batch())
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("my_reward", None)
    ok = "SystemExit(0)" in str(info.value) and "batch" in str(info.value)
    tally.record("reward_exits", "sys.exit(0) in a batched reward, in-process", ok)
    assert ok, str(info.value)
