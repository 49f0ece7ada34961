"""Every installed tool-call parser survives any string a model can write (issue 47): a seeded fuzz test.

Thousands of random strings built from the formats' own pieces (markers, brackets, quotes, escapes, digits,
surrogates) plus adversarial ones (nesting thousands deep, a 5,000-digit number, invalid UTF-8 given as bytes,
megabytes of text). Each parse must return ``(str, [ToolCall])`` whose malformed calls carry an ``error``
(the failed tool call the model then sees), never raise, and all of it must take well under 20 s.
"""

from __future__ import annotations

import random
import time

import pytest

from rl_agent.parsers import ToolCall
from rl_core.plugins import get_registry

SEED = 47
RANDOM_CASES = 3000

PIECES = [
    "<tool_call>", "</tool_call>", "<tool_call>\n", "\n</tool_call>", "{", "}", "[", "]", '"', ":", ",", " ", "\n",
    '"name"', '"arguments"', '"calculator"', '"python"', '{"name": "calculator", "arguments": {"expression": "1+1"}}',
    "\\", "\\u", "\\ud800", "\\udcff", "\\u0000", "\ud800", "\udfff", "\x00", "\ufffd", "é", "漢", "🙂",
    "0", "1", "9" * 50, "-", "1e309", "NaN", "Infinity", "-Infinity", "true", "null", "'", "<", ">", "</", "tool_call",
]


def _random_text(rng: random.Random) -> str:
    n = rng.choice([1, 3, 10, 40, 200])
    return "".join(rng.choice(PIECES) if rng.random() < 0.8 else chr(rng.randrange(0, 0x110000)) for _ in range(n))


def _adversarial() -> list:
    wrap = lambda body: "<tool_call>" + body + "</tool_call>"  # noqa: E731
    return [
        wrap("[" * 1000), wrap("[" * 100_000), wrap("{" * 100_000), wrap('{"a":' * 5000), "<tool_call>" + "[" * 100_000,
        wrap("7" * 5000), wrap('{"name": "calculator", "arguments": {"expression": ' + "9" * 5000 + "}}"),
        wrap('{"name": "calculator", "arguments": "' + "[" * 5000 + '"}'),
        wrap('{"name": "calculator", "arguments": "' + "9" * 5000 + '"}'),
        wrap('{"name": "x", "arguments": ' + "1" + "0" * 400 + "e99999}"), wrap("-" + "1" * 100_000),
        wrap('{"name": "\\ud800", "arguments": {"\\udcff": "\\ud800"}}'), wrap("\ud800\udfff\udcff"),
        b"<tool_call>\xff\xfe\xfd{\"name\": \"a\"}</tool_call>", b"\xc3\x28" * 1000, bytearray(b"<tool_call>\x80</tool_call>"),
        "x" * 3_000_000, ("<tool_call>" + "a" * 1000) * 2000, wrap("{" + "a" * 2_000_000 + "}"), "<tool_call>" * 100_000,
        "</tool_call>" * 100_000, wrap(""), wrap(" " * 10_000), wrap("null"), wrap('"just a string"'), wrap("[1, 2]"),
        wrap('{"name": 5}'), wrap('{"name": "a", "arguments": 5}'), wrap('{"name": "a", "arguments": "[1]"}'),
        wrap('{"name": "a", "arguments": {"x": NaN}}'), wrap('{"name": "a"}' * 1000), "",
    ]


def _parsers():
    reg = get_registry()
    return [pytest.param(name, id=name) for name in reg.names("tool_parser")]


def _check(parser, text) -> None:
    content, calls = parser.parse(text)
    assert isinstance(content, str)
    assert isinstance(calls, list) and all(isinstance(c, ToolCall) for c in calls)
    for c in calls:
        assert isinstance(c.name, str)
        assert c.error is None or isinstance(c.error, str)
        if c.error is None:
            assert c.name, "a call without a name must carry an error"
        else:
            c.error.encode("utf-8")  # the error is a tool message the model sees: valid text


@pytest.mark.parametrize("name", _parsers())
def test_every_parser_survives_any_string(name):
    parser = get_registry().get("tool_parser", name).load()()
    rng = random.Random(SEED)
    start = time.monotonic()
    texts = _adversarial() + [_random_text(rng) for _ in range(RANDOM_CASES)]
    for i, text in enumerate(texts):
        try:
            _check(parser, text)
        except AssertionError:
            raise
        except BaseException as exc:  # noqa: BLE001 - the point: nothing a model writes may raise
            pytest.fail(f"parser {name!r} raised {type(exc).__name__}: {str(exc)[:200]} on case {i} ({text[:80]!r}...)")
    assert time.monotonic() - start < 20, f"{len(texts)} cases took {time.monotonic() - start:.1f} s"


def test_hermes_reports_what_was_wrong():
    parser = get_registry().get("tool_parser", "hermes").load()()
    (call,) = parser.parse("<tool_call>" + "[" * 3000 + "</tool_call>")[1]
    assert call.error and "nested too deeply" in call.error
    (call,) = parser.parse("<tool_call>" + "7" * 5000 + "</tool_call>")[1]
    assert call.error and "digits" in call.error
    (call,) = parser.parse('<tool_call>{"name": "a", "arguments": {"x": 1}}</tool_call>')[1]
    assert call.error is None and call.name == "a" and call.arguments == {"x": 1}
