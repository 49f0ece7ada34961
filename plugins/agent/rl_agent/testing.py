"""A deterministic tool and tool-call format for multi-turn tests on tiny random models (and :func:`agent_context`:
the engine context that carries the agent runtime; the conformance case is :mod:`rl_agent.conformance`).

A random model never writes a well-formed tool call, so the ``every_turn``
format reads *every* assistant turn as one call of ``count_chars`` on that
turn's text: each trajectory then runs exactly ``max_assistant_turns``
turns, with tool results that depend on what was sampled. ``every_turn_all``
also calls three tools that fail (``raises``, ``returns_int``, ``hangs``)
every turn: the run must go on and count them. Register them with
:func:`register_fixtures` (the process registry plus this module).
"""

from __future__ import annotations

from typing import Any

from rl_agent.parsers import ToolCall
from rl_core import hookimpl
from rl_core.backends import WorkerContext
from rl_core.cards import Provider, ToolCard, ToolParserCard


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


def raises(text: str) -> str:
    """A tool that always fails.

    Args:
        text: ignored
    """
    raise RuntimeError("this tool always fails")


def returns_int(text: str) -> str:
    """A tool that returns a number instead of text.

    Args:
        text: ignored
    """
    return 42  # type: ignore[return-value]


async def hangs(text: str) -> str:
    """A tool that never answers.

    Args:
        text: ignored
    """
    import asyncio

    await asyncio.sleep(3600)
    return "never"


class EveryTurnAllParser(EveryTurnParser):
    """Every turn calls count_chars and the three failing tools."""

    def parse(self, text: str) -> tuple[str, list[ToolCall]]:
        return text, [ToolCall(name=n, arguments={"text": text}) for n in ("count_chars", "raises", "returns_int", "hangs")]


@hookimpl
def rl_core_register_tools(register):
    register(ToolCard(name="count_chars", factory=count_chars))
    for fn in (raises, returns_int, hangs):
        register(ToolCard(name=fn.__name__, factory=fn))


@hookimpl
def rl_core_register_tool_parsers(register):
    register(ToolParserCard(name="every_turn", factory=EveryTurnParser))
    register(ToolParserCard(name="every_turn_all", factory=EveryTurnAllParser))


def register_fixtures():
    """The process registry with these fixtures added (idempotent)."""
    import sys

    from rl_core.plugins import get_registry

    reg = get_registry()
    if "count_chars" in reg.cards["tool"]:
        return reg
    return get_registry(extra=[(sys.modules[__name__], Provider(distribution="rl-core-testing", entry_point="agent_fixtures"))])


def agent_context(config: Any, registry: Any = None, **context: Any) -> WorkerContext:
    """A :class:`WorkerContext` carrying ``config``'s agent runtime, as the workers hand rollout engines the resolved
    stack's (``Stack.agent``); ``registry``: the process registry by default (fixtures included once registered)."""
    from rl_core.plugins import get_registry
    from rl_core.rollout.multi_turn import agent_runtime

    agent, problems = agent_runtime(config, registry if registry is not None else get_registry())
    if problems:
        raise RuntimeError("; ".join(f"{p.key}: {p.what} ({p.fix})" for p in problems))
    return WorkerContext(agent=agent, **context)
