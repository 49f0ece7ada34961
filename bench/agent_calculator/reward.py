"""The calculator task's reward: 1 for the right product in the final answer, plus a small bonus for a tool call that ran.

    reward: {custom: {path: bench/agent_calculator/reward.py, name: compute_score}, kwargs: {call_bonus: 0.1}}

``solution_str`` is the text of the model's **last** assistant turn (what the
trainer passes for multi-turn rows, docs/agents.md), so the product counts
only when the model states it as its answer, not when it appears in a tool
result or an earlier turn. ``call_bonus`` (default 0.1, 0 turns it off) is
added when at least one calculator call of the trajectory ran (status "ok"):
a small shaping term so the first well-formed calls are preferred over
malformed ones before any answer is right; it cannot outweigh a correct
answer. The parts are returned too (``reward/correct_mean``,
``reward/tool_ok_mean``, ``reward/tool_calls_mean``).
"""

from __future__ import annotations

import re

_NUMBER = re.compile(r"-?\d[\d,]*")


def last_number(text: str) -> str | None:
    found = _NUMBER.findall(text or "")
    return found[-1].replace(",", "") if found else None


def compute_score(data_source=None, solution_str="", ground_truth="", extra_info=None, call_bonus: float = 0.1, **_):
    agent = (extra_info or {}).get("agent") or {}
    results = [r for turn in agent.get("turns", []) for r in turn.get("tool_results", [])]
    tool_ok = any(r.get("status") == "ok" and r.get("name") == "calculator" for r in results)
    correct = last_number(solution_str) == str(ground_truth).strip()
    return {
        "score": float(correct) + (float(call_bonus) if tool_ok else 0.0),
        "correct": float(correct),
        "tool_ok": float(tool_ok),
        "tool_calls": float(len(results)),
    }
