"""An agent written only against the ``openai`` client: it answers "Calculate a * b." with a calculator function.

rl-core starts ``solve(task)`` once per trajectory (``rollout.multi_turn.program.callable``), in its own process,
with ``task["base_url"]`` / ``task["api_key"]`` (also ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY``) pointing at the
endpoint the rollout engine serves, and ``task["messages"]`` the data row's prompt. Nothing here knows about
rl-core: the same function runs against any OpenAI-compatible server.

It returns no reward (the run's reward function scores the final answer) but says whether a calculator call ran.
"""

from __future__ import annotations

import ast
import json
import operator
from fractions import Fraction

import openai

TOOLS = [{
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression exactly.",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string", "description": "e.g. \"(12 + 7) * 3\""}},
                       "required": ["expression"]},
    },
}]

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def calculate(expression: str) -> str:
    """+ - * / on numbers, parsed (never eval'd); small sizes only."""
    if not isinstance(expression, str) or len(expression) > 200:
        raise ValueError("the expression must be a string of at most 200 characters")

    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return Fraction(str(node.value))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            a, b = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Div) and b == 0:
                raise ValueError("division by zero")
            return _OPS[type(node.op)](a, b)
        raise ValueError(f"{type(node).__name__} is not allowed")

    value = ev(ast.parse(expression.replace("x", "*").replace("×", "*"), mode="eval"))
    return str(value.numerator) if value.denominator == 1 else f"{float(value):.10g}"


def solve(task: dict) -> dict:
    client = openai.OpenAI(base_url=task["base_url"], api_key=task["api_key"], max_retries=0, timeout=1800)
    messages = list(task["messages"])
    tool_ok = False
    answer = None
    for _ in range(2):  # a call, then the answer
        try:
            reply = client.chat.completions.create(model="policy", messages=messages, tools=TOOLS)
        except openai.BadRequestError:  # e.g. the trajectory's token budget is spent
            break
        message = reply.choices[0].message
        answer = message.content
        if not message.tool_calls:
            break
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            try:
                result = calculate(json.loads(call.function.arguments)["expression"])
                tool_ok = tool_ok or call.function.name == "calculator"
            except Exception as exc:  # noqa: BLE001 - the model sees what was wrong
                result = f"Error: {exc}"
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return {"answer": answer, "tool_ok": tool_ok}
