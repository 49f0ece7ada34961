"""``rlcore check`` for the ``openai_agent`` loop: ``rollout.multi_turn.program`` parsed and checked, nothing run."""

from __future__ import annotations

import difflib
from typing import Any

from rl_core.problems import Problem
from rl_core.rewards.scoring import kwargs_problems

from rl_agent_openai.options import KEY, program_problems
from rl_agent_openai.reward import _load


def program_probe(config: Any, registry: Any) -> list[Problem]:
    mt = config.rollout.multi_turn
    if not mt.enable or mt.agent_loop != "openai_agent":
        if getattr(mt, "program", None) and mt.enable:
            return [Problem(key=KEY, severity="warning", what=f"is set but rollout.multi_turn.agent_loop is {mt.agent_loop!r}: no program is started",
                            fix="set rollout.multi_turn.agent_loop=openai_agent, or remove rollout.multi_turn.program")]
        return []
    out = program_problems(mt)
    if not getattr(mt, "program", None):
        out = [Problem(key=KEY, what="the openai_agent loop needs an agent program", fix="set rollout.multi_turn.program.callable=\"module:function\" or .command=[argv...]")]
    if mt.tools or mt.tool_config_path:
        out.append(Problem(key="rollout.multi_turn.tools", severity="warning",
                           what="the openai_agent loop runs no tools itself: the program's requests carry its tools and the program runs them",
                           fix="leave rollout.multi_turn.tools empty (the run's format still parses the model's tool calls)"))
    return out


def fallback_problems(config: Any, registry: Any) -> list[Problem]:
    """``agent_reward``'s other ``reward.kwargs`` go to its fallback function: their names and simple types checked
    against that function's parameters, as core checks a reward's own (:func:`rl_core.rewards.scoring.kwargs_problems`).
    Without a fallback they go nowhere: each is an error (``fallbakc`` is most likely ``fallback`` misspelt). A fallback
    that does not load is an error here: ``agent_reward``'s card has no trial call (a data row carries no agent result)."""
    kwargs = dict(config.reward.kwargs or {})
    spec = kwargs.pop("fallback", None)
    if config.reward.name != "agent_reward":
        return []
    if spec is None or spec == "":
        misspelt = [key for key in kwargs if difflib.get_close_matches(key, ["fallback"], n=1)]
        return [Problem(key=f"reward.kwargs.{key}", what="agent_reward hands its reward.kwargs other than fallback to the fallback function, "
                        "and reward.kwargs.fallback is not set: this one goes nowhere",
                        fix="did you mean reward.kwargs.fallback?" if misspelt
                        else "set reward.kwargs.fallback=path/to/reward.py:compute_score (a function that takes it), or remove it")
                for key in misspelt or kwargs]  # the others of a misspelt fallback are its consequences
    if not isinstance(spec, str):
        return []  # core's check of agent_reward's own parameters reports it (fallback: str | None)
    try:
        fn = _load(spec)
    except Exception as exc:  # noqa: BLE001 - the user's file or module: reported, not raised
        return [Problem(key="reward.kwargs.fallback", what=f"{spec!r} cannot be loaded: {type(exc).__name__}: {exc}",
                        fix="name a reward function as path/to/reward.py:compute_score or package.module:function")]
    return kwargs_problems(fn, kwargs, f"the fallback {spec}", ("data_source", "solution_str", "ground_truth", "extra_info"))
