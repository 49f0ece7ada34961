"""The calculator task's reward for the OpenAI-client agent: 1 for the right product in the final answer, plus
``call_bonus`` when the agent's calculator call ran (what it returned: ``extra_info["agent"]["result"]["tool_ok"]``).

Used as ``reward.kwargs.fallback`` of the ``agent_reward`` reward: a program that crashed or hung scores
``rollout.multi_turn.program.failure_reward`` instead, without reaching this function.
"""

from __future__ import annotations

import re

_NUMBER = re.compile(r"-?\d[\d,]*")


def compute_score(data_source=None, solution_str="", ground_truth="", extra_info=None, call_bonus: float = 0.1, **_):
    found = _NUMBER.findall(solution_str or "")
    correct = bool(found) and found[-1].replace(",", "") == str(ground_truth).strip()
    result = ((extra_info or {}).get("agent") or {}).get("result") or {}
    tool_ok = bool(result.get("tool_ok")) if isinstance(result, dict) else False
    return float(correct) + (float(call_bonus) if tool_ok else 0.0)
