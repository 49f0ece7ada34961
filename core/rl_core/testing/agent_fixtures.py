"""A deterministic tool and tool-call format for multi-turn tests on tiny random models.

A random model never writes a well-formed tool call, so the ``every_turn``
format reads *every* assistant turn as one call of ``count_chars`` on that
turn's text: each trajectory then runs exactly ``max_assistant_turns``
turns, with tool results that depend on what was sampled. Register them with
``get_registry(extra=[(rl_core.testing.agent_fixtures, Provider(distribution="rl-core-testing"))])``
(:func:`register_fixtures`).
"""

from __future__ import annotations

from rl_core.agent.parsers import ToolCall
from rl_core.cards import Provider, ToolCard, ToolParserCard
from rl_core.hookspecs import hookimpl


def count_chars(text: str) -> str:
    """Count the characters of a text.

    Args:
        text: the text to measure
    """
    return f"{len(text)} chars, {sum(c.isalpha() for c in text)} letters"


class EveryTurnParser:
    stop: tuple[str, ...] = ()
    markers: tuple[str, ...] = ()

    def parse(self, text: str) -> tuple[str, list[ToolCall]]:
        return text, [ToolCall(name="count_chars", arguments={"text": text})]


@hookimpl
def rl_core_register_tools(register):
    register(ToolCard(name="count_chars", factory=count_chars))


@hookimpl
def rl_core_register_tool_parsers(register):
    register(ToolParserCard(name="every_turn", factory=EveryTurnParser))


def register_fixtures():
    """The process registry with these fixtures added (idempotent)."""
    import sys

    from rl_core.plugins import get_registry

    reg = get_registry()
    if "count_chars" in reg.cards["tool"]:
        return reg
    return get_registry(extra=[(sys.modules[__name__], Provider(distribution="rl-core-testing", entry_point="agent_fixtures"))])
