"""Tools: the calculator, tools from functions and verl's YAML, calls that fail, the hermes format, the registry."""

from __future__ import annotations

import asyncio
import threading
import time
from fractions import Fraction

import pytest

from rl_agent.calculator import CalculatorError, calculator, evaluate
from rl_agent.parsers import HermesParser
from rl_agent.tools import ToolConfigError, call_tool, hung_calls, load_tool_config, tool_from_function


def test_calculator_is_exact_and_refuses_code():
    assert calculator("(12 + 7) * 3 / 4") == "14.25"
    assert calculator("0.1 + 0.2") == "0.3"
    assert evaluate("1/3") == Fraction(1, 3) and calculator("2^10") == "1024"
    assert calculator("-7 // 2") == "-4" and calculator("7 % 3") == "1"
    for bad, why in [
        ("__import__('os').system('id')", "Call is not allowed"),
        ("x + 1", "Name is not allowed"),
        ("9**9**9", "exponent"),
        ("10**900 * 10**900 * 10**900", "digits"),
        ("1/0", "division by zero"),
        ("'a' * 3", "not allowed"),
        ("1" * 600, "characters"),
    ]:
        with pytest.raises(CalculatorError, match=why):
            evaluate(bad)


def add_numbers(a: int, b: int, *, secret: str = "") -> str:
    """Add two integers.

    Args:
        a: the first
        b: the second
    """
    return str(a + b) + secret


def test_a_typed_function_is_a_tool_with_hidden_per_sample_kwargs():
    tool = tool_from_function(add_numbers)
    fn = tool.schema["function"]
    assert tool.name == "add_numbers" and fn["description"] == "Add two integers."
    assert set(fn["parameters"]["properties"]) == {"a", "b"} and tool.hidden == {"secret"}
    r = asyncio.run(call_tool(tool, "add_numbers", {"a": 2, "b": 3}, timeout_s=5, tools_kwargs={"add_numbers": {"secret": "!"}}))
    assert r.ok and r.text == "5!"
    r = asyncio.run(call_tool(tool, "add_numbers", {"a": 2, "b": 3, "secret": "x"}, timeout_s=5))
    assert r.status == "bad_arguments", "the model cannot set a hidden argument"

    def no_doc(x: int) -> str:
        return ""

    with pytest.raises(ToolConfigError, match="docstring"):
        tool_from_function(no_doc)


async def _hang_async(x: int) -> str:
    await asyncio.sleep(30)
    return "never"


def test_failing_tools_are_counted_results_not_crashes():
    def boom(x: int) -> str:
        raise RuntimeError("kaput")

    def number(x: int) -> str:
        return 42

    release = threading.Event()

    def hang(x: int) -> str:
        release.wait(60)
        return "late"

    schema = lambda name: {"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}}}  # noqa: E731
    run = lambda fn, args, t=5: asyncio.run(call_tool(tool_from_function(fn, schema=schema(fn.__name__)), fn.__name__, args, timeout_s=t))  # noqa: E731
    assert run(boom, {"x": 1}).status == "error" and "kaput" in run(boom, {"x": 1}).text
    assert run(number, {"x": 1}).status == "bad_result"
    assert run(hang, {"x": 1}, 0.2).status == "timeout"
    assert hung_calls("hang") == 1  # its thread cannot be killed: counted until it returns
    release.set()
    _wait_until(lambda: hung_calls("hang") == 0)
    assert run(_hang_async, {"x": 1}, 0.2).status == "timeout"
    assert run(boom, {"y": 1}).status == "bad_arguments"
    assert run(boom, {}).status == "bad_arguments"
    assert asyncio.run(call_tool(None, "nope", {}, timeout_s=1)).status == "unknown_tool"


class EchoTool:
    """A class following verl's BaseTool protocol."""

    def __init__(self, config, tool_schema):
        self.prefix = config.get("prefix", "")
        self.name = tool_schema.function.name
        self.store = {}

    async def create(self, instance_id=None, ground_truth=None, **kwargs):
        self.store["id"] = ground_truth
        return "id-1", None

    async def execute(self, instance_id, parameters, **kwargs):
        return f"{self.prefix}{parameters['text']}|{self.store['id']}", 0.0, {}

    async def release(self, instance_id, **kwargs):
        self.store.clear()


def test_verl_tool_config_yaml(tmp_path):
    cfg = tmp_path / "tools.yaml"
    schema = "{type: function, function: {name: echo, description: echo, parameters: {type: object, properties: {text: {type: string}}, required: [text]}}}"
    cfg.write_text(
        "tools:\n"
        f"  - class_name: test_agent_tools.EchoTool\n    config: {{type: native, prefix: '> '}}\n    tool_schema: {schema}\n"
        "  - class_name: rl_agent.calculator.calculator\n"
    )
    tools = {t.name: t for t in load_tool_config(cfg)}
    assert set(tools) == {"echo", "calculator"}
    r = asyncio.run(call_tool(tools["echo"], "echo", {"text": "hi"}, timeout_s=5, tools_kwargs={"echo": {"create_kwargs": {"ground_truth": "42"}}}))
    assert r.ok and r.text == "> hi|42"
    bad = tmp_path / "bad.yaml"
    bad.write_text("tools:\n  - class_name: no_such_pkg.Tool\n    tool_schema: " + schema + "\n")
    with pytest.raises(ToolConfigError, match=r"tools\[0\]\.class_name.*no_such_pkg"):
        load_tool_config(bad)
    bad.write_text("tools:\n  - class_name: test_agent_tools.EchoTool\n    tool_schema: {type: function, function: {name: 'bad name!'}}\n")
    with pytest.raises(ToolConfigError, match="function.name"):
        load_tool_config(bad)


def test_hermes_parser():
    p = HermesParser()
    content, calls = p.parse('Let me compute.<tool_call>{"name": "calculator", "arguments": {"expression": "2+2"}}</tool_call>')
    assert content == "Let me compute." and calls[0].name == "calculator" and calls[0].arguments == {"expression": "2+2"}
    _, calls = p.parse('<tool_call>{"name": "a", "arguments": "{\\"x\\": 1}"}</tool_call><tool_call>{bad</tool_call>')
    assert calls[0].arguments == {"x": 1} and calls[1].error and "JSON" in calls[1].error
    assert p.parse("The answer is 4.") == ("The answer is 4.", [])
    assert p.parse("<tool_call>{\"name\"")[1][0].error


def test_builtins_are_registered_by_name():
    from rl_core.plugins import get_registry

    reg = get_registry()
    assert {"calculator", "python"} <= set(reg.names("tool"))
    assert "tool_agent" in reg.names("agent_loop") and "hermes" in reg.names("tool_parser")


def _wait_until(cond, limit_s: float = 60.0) -> None:
    deadline = time.monotonic() + limit_s
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def test_hung_sync_tool_calls_are_bounded():
    """A sync tool that hangs: each timed-out call leaves a thread (counted); at max_hung further calls are refused
    (a counted error, nothing started) until the hung calls return."""
    release = threading.Event()
    started = []

    def stuck(x: int) -> str:
        started.append(x)
        release.wait(60)
        return "done"

    schema = {"type": "function", "function": {"name": "stuck", "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}}}
    tool = tool_from_function(stuck, schema=schema)
    call = lambda x: asyncio.run(call_tool(tool, "stuck", {"x": x}, timeout_s=0.05, max_hung=2))  # noqa: E731
    try:
        assert [call(1).status, call(2).status] == ["timeout", "timeout"]
        assert hung_calls("stuck") == 2
        refused = call(3)
        assert refused.status == "hung" and "2 of its earlier calls are still running" in refused.text
        assert started == [1, 2], "a refused call must not start a thread"
    finally:
        release.set()
    _wait_until(lambda: hung_calls("stuck") == 0)
    assert call(4).status != "hung" and 4 in started  # runs again once the hung calls returned
    _wait_until(lambda: hung_calls("stuck") == 0)


def test_calls_to_tools_that_do_not_exist_share_one_counter():
    """A model's made-up tool names (a number, a typo) are errors counted under "<unknown tool>", not one metric each."""
    from types import SimpleNamespace

    from rl_agent.loop import AgentHandle, AgentSample
    from rl_agent.parsers import ToolCall
    from rl_agent.runner import AgentStats

    stats = AgentStats()
    handle = AgentHandle(tokenizer=None, parser=None, tools={"calculator": tool_from_function(calculator)},
                         config=SimpleNamespace(tool_timeout_s=5, max_hung_tool_calls=4), chat=None, eos_ids=[], generate=None, stats=stats)
    calls = [ToolCall("108000", {}), ToolCall("algebra", {}), ToolCall("calculator", {"expression": "2 * 3"}), ToolCall("", error="bad JSON")]
    results = asyncio.run(handle.call_tools(calls, AgentSample(index=0, prompt_ids=[], messages=[], budget=8)))
    assert [r.status for r in results] == ["unknown_tool", "unknown_tool", "ok", "bad_arguments"]
    assert stats.values["agent/tool_errors/<unknown tool>"] == 2 and stats.values["agent/tool_errors/<malformed>"] == 1
    assert not any("108000" in k or "algebra" in k for k in stats.values) and stats.values["agent/tool_errors"] == 3
