"""The ``agent_reward`` reward: what the agent program returned, else a reward function of the final state.

    reward:
      name: agent_reward
      kwargs: {fallback: path/to/reward.py:compute_score}   # or "package.module:function"; optional

A row of the ``openai_agent`` loop carries ``extra_info["agent"]["reward"]``: the program's returned reward, or
``rollout.multi_turn.program.failure_reward`` when it crashed, hung or flooded. That is the score. Without one (the
program returned no reward) the ``fallback`` function scores the row with the usual arguments (``solution_str``:
the final assistant turn; ``extra_info["agent"]["result"]``: what the program returned); without a fallback that
is an error naming the row's program status.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
from typing import Any


@functools.lru_cache(maxsize=8)
def _load(spec: str):
    target, sep, name = spec.rpartition(":")
    if not sep or not target or not name:
        raise ValueError(f"reward.kwargs.fallback must be \"path/to/file.py:function\" or \"package.module:function\", got {spec!r}")
    if target.endswith(".py"):
        mod_spec = importlib.util.spec_from_file_location(f"rl_agent_reward_fallback_{abs(hash(target))}", target)
        if mod_spec is None or mod_spec.loader is None:
            raise ValueError(f"reward.kwargs.fallback: cannot load {target!r}")
        module = importlib.util.module_from_spec(mod_spec)
        mod_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(target)
    fn = getattr(module, name, None)
    if not callable(fn):
        raise ValueError(f"reward.kwargs.fallback: {target!r} has no function {name!r}")
    return fn


def agent_reward(data_source=None, solution_str: str = "", ground_truth: Any = None, extra_info: dict | None = None, fallback: str | None = None, **kwargs):
    agent = (extra_info or {}).get("agent") or {}
    reward = agent.get("reward")
    if reward is not None:
        return float(reward)
    if fallback:
        return _load(fallback)(data_source=data_source, solution_str=solution_str, ground_truth=ground_truth, extra_info=extra_info, **kwargs)
    raise ValueError(f"the agent program returned no reward (status {agent.get('status', 'unknown')!r}) and reward.kwargs.fallback names no "
                     "reward function: return a reward from the program, or set reward.kwargs.fallback=path/to/reward.py:compute_score")
