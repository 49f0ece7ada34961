"""Tool-call formats, registered by name (:class:`~rl_core.cards.ToolParserCard`).

A parser turns an assistant turn's text into ``(content, calls)``. A call
whose JSON does not parse is kept as a :class:`ToolCall` with ``error`` set:
the loop answers it with a tool message saying what was wrong (counted as a
tool error), so the model learns the format instead of the run crashing.

``stop``: strings that end a turn early (the end of a call), used when
``rollout.multi_turn.stop_at_tool_call_end`` is on. ``markers``: the text a
chat template must pass through unchanged for the format to work (checked by
``rlcore check``).
"""

from __future__ import annotations

import json
import re
from typing import Any

import attrs


@attrs.frozen
class ToolCall:
    name: str
    arguments: Any = attrs.field(factory=dict)
    error: str | None = None


class HermesParser:
    """``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (Hermes / Qwen2.5 / Qwen3 format)."""

    start, end = "<tool_call>", "</tool_call>"
    stop = ("</tool_call>",)
    markers = ("<tool_call>", "</tool_call>")
    _pattern = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)  # kept for code that reads it; parse scans linearly

    def parse(self, text: str) -> tuple[str, list[ToolCall]]:
        text = as_text(text)
        calls, content, pos, opened = [], [], 0, False
        # a scan with str.find, linear in the text (a lazy regex rescans the rest of the text from every unclosed
        # <tool_call>: quadratic, minutes on a model's 1 MB of "<tool_call>" repeated)
        while (start := text.find(self.start, pos)) != -1:
            content.append(text[pos:start])
            end = text.find(self.end, start + len(self.start))
            if end == -1:
                opened = True
                break
            calls.append(self._call(text[start + len(self.start) : end].strip()))
            pos = end + len(self.end)
        else:
            content.append(text[pos:])
        if not calls and opened:  # an opened call never closed (e.g. cut by the budget)
            calls.append(ToolCall(name="", error="a <tool_call> was opened but not closed with </tool_call>"))
        return "".join(content).strip(), calls

    @staticmethod
    def _call(body: str) -> ToolCall:
        data, problem = loads(body)
        if problem:
            return ToolCall(name="", error=f"the tool call is not valid JSON ({problem})")
        if not isinstance(data, dict) or not isinstance(data.get("name"), str):
            return ToolCall(name="", error='a tool call must be a JSON object {"name": "<tool>", "arguments": {...}}')
        args = data.get("arguments", {})
        if isinstance(args, str):  # some models write the arguments as a JSON string
            args, problem = loads(args)
            if problem:
                return ToolCall(name=data["name"], error="the arguments are a string that is not a JSON object")
        return ToolCall(name=data["name"], arguments=args)


def as_text(text: Any) -> str:
    """A parser's input as ``str``: bytes decoded (invalid UTF-8 replaced), anything else by ``str()``."""
    if isinstance(text, str):
        return text
    if isinstance(text, (bytes, bytearray)):
        return bytes(text).decode("utf-8", errors="replace")
    return str(text)


def loads(body: str) -> tuple[Any, str | None]:
    """``(value, None)``, or ``(None, what is wrong)`` for any text a model can write: invalid JSON, nesting
    deeper than the interpreter's recursion limit, an integer beyond Python's digit limit (whose ValueError has no
    ``msg``), a bare constant such as ``NaN``."""
    try:
        return json.loads(body), None
    except json.JSONDecodeError as exc:
        return None, f"{exc.msg} at character {exc.pos}"
    except RecursionError:
        return None, "nested too deeply"
    except (ValueError, TypeError, OverflowError, MemoryError) as exc:
        return None, str(exc).split(";")[0][:200]


def hermes() -> HermesParser:
    return HermesParser()
