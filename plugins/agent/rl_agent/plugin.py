"""rl-agent's entry point: the tools ``calculator`` and ``python``, the ``hermes`` format, the ``tool_agent`` loop (whose
card names the runner rollout backends call, :class:`rl_agent.runner.AgentRuntime`), and the ``rollout.multi_turn``
config section (:class:`rl_agent.config.MultiTurnConfig`, a ``ConfigSectionCard``) and its checks as a check of the run
plan (:func:`rl_agent.checks.agent_probe`, a ``CheckCard`` of stage ``files``)."""

from __future__ import annotations

from rl_core import hookimpl
from rl_core.cards import AgentLoopCard, CheckCard, ConfigSectionCard, ToolCard, ToolParserCard

from rl_agent.checks import RUNNER

CALCULATOR_SCHEMA = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression exactly.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string", "description": 'numbers with + - * / // % ** and parentheses, e.g. "(12 + 7) * 3 / 4"'}},
            "required": ["expression"],
        },
    },
}

PYTHON_SCHEMA = {
    "type": "function",
    "function": {
        "name": "python",
        "description": "Run a Python program and return what it prints. Use print() to show results.",
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string", "description": "the Python source to run (standard library only; no network, no files outside its working directory)"}},
            "required": ["code"],
        },
    },
}


@hookimpl
def rl_core_register_tools(register):
    register(ToolCard(name="calculator", factory="rl_agent.calculator:calculator", schema=CALCULATOR_SCHEMA,
                      description="exact arithmetic (ast-parsed rationals, bounded sizes)"))
    register(ToolCard(name="python", factory="rl_agent.sandbox:python", schema=PYTHON_SCHEMA,
                      description="Python code in a sandboxed process (time, memory, output limits; bubblewrap when present)"))


@hookimpl
def rl_core_register_tool_parsers(register):
    register(ToolParserCard(name="hermes", factory="rl_agent.parsers:hermes", description='<tool_call>{"name", "arguments"}</tool_call>'))


@hookimpl
def rl_core_register_agent_loops(register):
    register(AgentLoopCard(name="tool_agent", factory="rl_agent.tool_agent:tool_agent", runner=RUNNER,
                           description="generate, call tools, append results through the chat template, repeat"))


@hookimpl
def rl_core_register_checks(register):
    register(CheckCard(name="agent", stage="files", order=15, factory="rl_agent.checks:agent_probe",
                       description="rollout.multi_turn: the tools, the tool-call format, the agent loops the data names"))


@hookimpl
def rl_core_register_config_sections(register):
    register(ConfigSectionCard(name="rollout.multi_turn", factory="rl_agent.config:MultiTurnConfig",
                               description="agentic rollouts: tools, tool-call format, agent loop, turn and tool limits (docs/agents.md)"))
