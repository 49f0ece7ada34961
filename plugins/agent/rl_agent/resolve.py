"""``rollout.multi_turn`` names -> tools, a parser and agent loops from the agent cards the resolver handed the runtime.

``registry`` is the :class:`rl_core.plugins.Registry` of the agent card kinds
(:func:`rl_core.rollout.multi_turn.agent_runtime`); nothing here looks up the process registry.
"""

from __future__ import annotations

from typing import Any

from rl_agent.tools import Tool, ToolConfigError, as_tool, load_tool_config
from rl_core.plugins import UnknownCardError


def build_tools(mt, registry) -> dict[str, Tool]:
    """The tools named in ``rollout.multi_turn.tools`` and those of ``tool_config_path``, by name."""
    reg = registry
    tools: dict[str, Tool] = {}
    for i, name in enumerate(mt.tools):
        try:
            card = reg.get("tool", name)
        except UnknownCardError as exc:
            raise ToolConfigError(f"rollout.multi_turn.tools[{i}]: {exc}") from None
        try:
            tool = as_tool(card.load(), name=card.name, schema=card.schema)
        except ToolConfigError:
            raise
        except Exception as exc:  # noqa: BLE001 - the factory's module or attribute is missing, or it fails
            raise ToolConfigError(f"rollout.multi_turn.tools[{i}]: the tool {name!r} ({card.factory}, from {card.provider or 'an unregistered card'}) "
                                  f"cannot be built: {type(exc).__name__}: {exc}") from None
        tools[tool.name] = tool
    if mt.tool_config_path:
        for tool in load_tool_config(mt.tool_config_path):
            if tool.name in tools:
                raise ToolConfigError(f"rollout.multi_turn: the tool {tool.name!r} is both in tools and in {mt.tool_config_path}; keep one")
            tools[tool.name] = tool
    return tools


def tool_parser(name: str, registry) -> Any:
    try:
        card = registry.get("tool_parser", name)
    except UnknownCardError as exc:
        raise ToolConfigError(f"rollout.multi_turn.format: {exc}") from None
    return card.load()()


def agent_loop(name: str, registry) -> Any:
    try:
        card = registry.get("agent_loop", name)
    except UnknownCardError as exc:
        raise ToolConfigError(f"rollout.multi_turn.agent_loop (or a data row's agent_name): {exc}") from None
    return card.load()
