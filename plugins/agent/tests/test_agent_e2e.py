"""A tiny GRPO run with multi-turn rollouts through the trainer: tools that raise, hang or return a non-string are
counted tool errors / timeouts in the step's agent/* metrics, and the run goes on to the end."""

from __future__ import annotations

from rl_agent.testing import register_fixtures

from tests.e2e.helpers import train_tiny


def test_failing_tools_are_counted_and_training_completes(tmp_path):
    register_fixtures()
    multi_turn = {"enable": True, "tools": ["count_chars", "raises", "returns_int", "hangs"], "format": "every_turn_all",
                  "max_assistant_turns": 2, "max_tokens_per_turn": 3, "tool_timeout_s": 0.3, "check_tokens": True}
    rows = train_tiny(tmp_path, steps=2, rollout__multi_turn=multi_turn, data__max_response_length=400, trainer__test_freq=2)
    assert len(rows) >= 2 and rows[-1]["step"] == 2
    m = next(r for r in rows if r["step"] == 1)
    trajectories = m["agent/trajectories"]
    assert trajectories > 0 and m["agent/turns"] == 2 * trajectories and m["agent/turns_mean"] == 2
    assert m["agent/tool_calls"] == 4 * trajectories
    assert m["agent/tool_errors/raises"] == m["agent/tool_errors/returns_int"] == trajectories
    assert m["agent/tool_timeouts/hangs"] == trajectories and "agent/tool_errors/count_chars" not in m
    assert m["agent/stop/max_assistant_turns"] == trajectories
    assert m.get("agent/token_check_mismatches", 0) == 0
    assert m["agent/inserted_tokens"] > 0 and 2 * trajectories <= m["agent/sampled_tokens"] <= 2 * 3 * trajectories
    for val in (rows[0], rows[-1]):  # validation before training and at step 2 (greedy, 4 prompts): val/agent/*
        assert val["val/agent/trajectories"] == 4 and val["val/agent/tool_timeouts/hangs"] == 4
