"""rl-agent-openai's entry point: the ``openai_agent`` loop (its card names the runner rollout backends call,
:class:`rl_agent_openai.runtime.OpenAIAgentRuntime`), the ``agent_reward`` reward, and the check of
``rollout.multi_turn.program`` (a ``CheckCard`` of stage ``values``)."""

from __future__ import annotations

from rl_core import hookimpl
from rl_core.cards import AgentLoopCard, CheckCard, RewardCard


@hookimpl
def rl_core_register_agent_loops(register):
    register(AgentLoopCard(name="openai_agent", factory="rl_agent_openai.runtime:openai_agent", runner="rl_agent_openai.runtime:OpenAIAgentRuntime",
                           description="your agent program per trajectory, against an OpenAI-compatible endpoint the rollout engine serves"))


@hookimpl
def rl_core_register_rewards(register):
    register(RewardCard(name="agent_reward", factory="rl_agent_openai.reward:agent_reward", fields=frozenset(), trial=False,
                        description="the agent program's returned reward (or the failure score), else reward.kwargs.fallback"))


@hookimpl
def rl_core_register_checks(register):
    register(CheckCard(name="openai_agent", stage="values", order=16, factory="rl_agent_openai.checks:program_probe",
                       description="rollout.multi_turn.program: the agent program and its limits (the openai_agent loop)"))
    register(CheckCard(name="agent_reward_kwargs", stage="values", order=17, factory="rl_agent_openai.checks:fallback_problems",
                       description="agent_reward's reward.kwargs against its fallback function's parameters"))
