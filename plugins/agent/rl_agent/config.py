"""rl-agent's config section ``rollout.multi_turn`` (a ConfigSectionCard: rl_core.config.sections), read and checked
with core's own sections; core reads only its ``enable`` (getattr: absent when no package provides the section) and
runs the Plan's agent runtime (rl_core.rollout.multi_turn.agent_runtime, Plan.agent)."""

from __future__ import annotations

from typing import Any

import attrs
from attrs import field
from rl_core.config.schema import choice, num, pos, text


@attrs.frozen(kw_only=True)
class MultiTurnConfig:
    """Agentic rollouts (the rl-agent plugin, docs/agents.md): tool calls between assistant turns. Data only: the plugin reads it."""

    enable: bool = False
    agent_loop: str = text("tool_agent", hint="a registered agent loop")  # a data row's agent_name overrides it
    tools: list[str] = field(factory=list)  # registered tool names, e.g. [calculator, python]
    tool_config_path: str | None = None  # verl's tool-config YAML: tools: [{class_name, config, tool_schema}]
    format: str = text("hermes", hint="a registered tool-call format")  # the tool-call parser
    max_assistant_turns: int | None = pos(None, hint="assistant turns per trajectory; null: until the budget")
    max_tokens_per_turn: int | None = pos(None, hint="sampled tokens per assistant turn; null: the rest of the budget")
    max_parallel_calls: int = pos(8, hint="tool calls run per turn")
    max_tool_response_length: int = pos(256, hint="characters of a tool result the model sees")
    tool_response_truncate_side: str = choice("right", ("left", "right", "middle"))
    tool_timeout_s: float = num(30.0, gt=0, hint="seconds per tool call, e.g. 30")
    # a sync tool's calls still running past their timeout (abandoned threads); at this many, its next calls are refused
    max_hung_tool_calls: int = pos(4, hint="hung calls of a sync tool before its calls are refused")
    stop_at_tool_call_end: bool = True  # end a turn at the format's end-of-call text (e.g. </tool_call>)
    check_tokens: bool = False  # compare each trajectory with the chat template's rendering (agent/token_check_mismatches)
    # the agent program a loop starts per trajectory (rl-agent-openai's openai_agent loop: callable or command, limits,
    # failure_reward; docs/agents.md); data only: that plugin checks its keys
    program: dict[str, Any] = field(factory=dict)
