"""What an agent loop receives and returns.

An agent loop is ``async def loop(handle: AgentHandle, sample: AgentSample) -> Trajectory``,
registered as an :class:`~rl_core.cards.AgentLoopCard`. It builds the
trajectory from token ids only:

- ``await handle.generate(ids, max_new_tokens)``: the engine's exact sampled
  ids (and their log-probs) continuing ``ids``; every active trajectory's
  request of a turn is decoded in one batch;
- ``await handle.call_tools(calls, sample)``: the calls run concurrently, each
  under ``rollout.multi_turn.tool_timeout_s``; failures come back as results;
- ``handle.chat.inserted_ids(messages, ended_with_eos=...)``: the template
  tokens to insert after a turn (:mod:`rl_agent.chat`);
- :meth:`Trajectory.add_sampled` / :meth:`Trajectory.add_inserted`: the only
  ways to grow the response, so ``response_mask`` is 1 exactly on sampled
  tokens and the log-probs line up with it.
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, Sequence

import attrs

from rl_agent.parsers import ToolCall
from rl_agent.tools import Tool, ToolResult, call_tool
from rl_core.rollout.multi_turn import Generated  # the turn record every rollout backend returns (core's contract)

__all__ = ["AgentHandle", "AgentLoop", "AgentSample", "Generated", "Trajectory"]


@attrs.define
class AgentSample:
    """One trajectory to build: the prompt's token ids and messages, and the row's fields."""

    index: int
    prompt_ids: list[int]
    messages: list[dict]
    budget: int  # response tokens over the whole trajectory (data.max_response_length)
    extra_info: dict = attrs.field(factory=dict)
    tools_kwargs: dict = attrs.field(factory=dict)


@attrs.define
class Trajectory:
    prompt_ids: list[int]
    messages: list[dict] = attrs.field(factory=list)
    response_ids: list[int] = attrs.field(factory=list)
    response_mask: list[int] = attrs.field(factory=list)
    log_probs: list[float] = attrs.field(factory=list)
    turns: list[dict] = attrs.field(factory=list)  # per assistant turn: sampled / inserted tokens, calls, results, finish
    stop_reason: str = ""
    token_check: str | None = None  # set by the runner when rollout.multi_turn.check_tokens is on

    def add_sampled(self, ids: Sequence[int], log_probs: Sequence[float] | None) -> None:
        self.response_ids.extend(int(i) for i in ids)
        self.response_mask.extend([1] * len(ids))
        self.log_probs.extend(float(x) for x in log_probs) if log_probs is not None else self.log_probs.extend([0.0] * len(ids))

    def add_inserted(self, ids: Sequence[int]) -> None:
        self.response_ids.extend(int(i) for i in ids)
        self.response_mask.extend([0] * len(ids))
        self.log_probs.extend([0.0] * len(ids))


class AgentHandle:
    """What a loop may use (see the module docstring). One per rollout call, shared by its trajectories."""

    def __init__(self, *, tokenizer, parser, tools: dict[str, Tool], config, chat, eos_ids: Sequence[int],
                 generate: Callable[[list[int], int], Awaitable[Generated]], stats) -> None:
        self.tokenizer = tokenizer
        self.parser = parser
        self.tools = tools
        self.config = config
        self.chat = chat
        self.eos_ids = frozenset(int(i) for i in eos_ids)
        self._generate = generate
        self.stats = stats

    async def generate(self, ids: Sequence[int], max_new_tokens: int) -> Generated:
        return await self._generate(list(ids), int(max_new_tokens))

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)

    def truncate(self, text: str) -> str:
        """A tool result cut to ``max_tool_response_length`` characters (``tool_response_truncate_side``)."""
        limit = self.config.max_tool_response_length
        if len(text) <= limit:
            return text
        self.stats.add("agent/tool_truncations")
        side = self.config.tool_response_truncate_side
        mark = "...(truncated)"
        if side == "left":
            return mark + text[-limit:]
        if side == "middle":
            half = limit // 2
            return text[:half] + mark + text[len(text) - (limit - half) :]
        return text[:limit] + mark

    def parse(self, text: str) -> tuple[str, list[ToolCall]]:
        """``parser.parse(text)`` that never raises: a parser that fails (a plugin's, on text it did not expect) gives
        one malformed call (a failed tool call the model sees, counted in ``agent/parser_errors``)."""
        try:
            content, calls = self.parser.parse(text)
            calls = list(calls)
            if not all(isinstance(c, ToolCall) for c in calls):
                raise TypeError(f"it returned {sorted({type(c).__name__ for c in calls})}, not ToolCall objects")
        except Exception as exc:  # noqa: BLE001 - a parser must not end the run (RecursionError included)
            self.stats.add("agent/parser_errors")
            what = f"{type(exc).__name__}: {exc}"[:300].encode("utf-8", "replace").decode("utf-8")
            return text, [ToolCall(name="", error=f"the tool call could not be parsed ({what})")]
        return content, calls

    async def call_tools(self, calls: Sequence[ToolCall], sample: AgentSample) -> list[ToolResult]:
        """Run ``calls`` concurrently; malformed calls are answered without running anything."""

        async def one(call: ToolCall) -> ToolResult:
            if call.error:
                return ToolResult(text=f"Error: {call.error}", status="bad_arguments")
            return await call_tool(self.tools.get(call.name), call.name, call.arguments, timeout_s=self.config.tool_timeout_s, tools_kwargs=sample.tools_kwargs,
                                   max_hung=self.config.max_hung_tool_calls)

        results = await asyncio.gather(*(one(c) for c in calls))
        for call, result in zip(calls, results):
            # per-tool counters only under the names of tools that exist: a model's made-up names would each add a metric
            name = "<malformed>" if not call.name else call.name if call.name in self.tools else "<unknown tool>"
            self.stats.tool_result(name, result)
        return list(results)


AgentLoop = Callable[[AgentHandle, AgentSample], Awaitable[Trajectory]]
Kwargs = dict[str, Any]
