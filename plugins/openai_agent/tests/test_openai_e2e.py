"""Training steps through the trainer with the openai_agent loop (tiny model, fsdp): programs that crash before any
call (empty trajectories) beside programs that answer; every step completes, the crashed ones score failure_reward, the rest their returned reward."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.helpers import train_tiny

pytest.importorskip("openai", reason="the programs use the openai client (pip install -e 'plugins/openai_agent[test]')")
pytest.importorskip("rl_train_fsdp", reason="the update runs on the fsdp train engine (pip install -e plugins/train_fsdp)")

PROGRAMS = str(Path(__file__).with_name("agent_programs.py"))


def test_training_steps_complete_with_crashing_programs(tmp_path):
    multi_turn = {"enable": True, "agent_loop": "openai_agent", "max_tokens_per_turn": 3,
                  "program": {"callable": f"{PROGRAMS}:mixed", "timeout_s": 120, "failure_reward": 0.0}}
    rows = train_tiny(tmp_path, steps=2, rollout__multi_turn=multi_turn, reward__name="agent_reward", reward__custom={"path": None},
                      data__max_response_length=64, trainer__test_freq=2)
    assert rows[-1]["step"] == 2
    steps = [r for r in rows if r["step"] in (1, 2) and "agent/trajectories" in r and "reward/mean" in r]
    assert len(steps) == 2, rows
    for m in steps:
        n = m["agent/trajectories"]
        ok, crashed = m.get("agent/stop/ok", 0), m.get("agent/stop/crash", 0)
        assert ok + crashed == n and ok > 0 and crashed > 0
        assert m["agent/turns"] == 2 * ok  # two calls per answering program, none per crashed one (an empty trajectory)
        assert m["reward/mean"] == pytest.approx(ok / n)  # 1 per answering program, failure_reward 0 per crashed
        assert m["agent/inserted_tokens"] > 0  # the agent's "go on" between calls, masked
