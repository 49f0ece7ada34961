"""OpenAI chat messages, tools and tool calls <-> the chat template's messages and the run's tool-call format.

- :func:`template_messages`: request messages as the chat template renders them (an assistant message's
  ``tool_calls`` written back in the run's format, e.g. ``<tool_call>{...}</tool_call>``; a ``tool`` message
  named after the call it answers);
- :func:`history_key`: a message reduced to what the model saw (role, text, calls, the call it answers), so a
  session can tell whether a request extends the previous call's conversation;
- :func:`chat_completion` / :func:`chat_chunks` / :func:`completion` / :func:`completion_chunks`: the response
  bodies (the streamed ones as server-sent-event payloads).
"""

from __future__ import annotations

import json
import time
from typing import Any, Sequence

from rl_agent.parsers import ToolCall


class Refused(Exception):
    """A request the endpoint refuses: an HTTP status and an OpenAI-style error (type, code, message)."""

    def __init__(self, status: int, message: str, code: str = "invalid_request", param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param

    def body(self) -> dict:
        kind = {401: "authentication_error", 404: "not_found_error", 409: "conflict_error", 413: "invalid_request_error",
                429: "rate_limit_error"}.get(self.status, "invalid_request_error")
        return {"error": {"message": self.message, "type": kind, "code": self.code, "param": self.param}}


def text_of(content: Any, where: str) -> str:
    """A message's text: a string, None (empty) or a list of text parts; anything else is refused."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for p in content:
            if not isinstance(p, dict) or p.get("type") != "text" or not isinstance(p.get("text"), str):
                raise Refused(400, f"{where}: only text content parts are served (got {p!r:.80}); images and audio are not", param="messages")
            parts.append(p["text"])
        return "".join(parts)
    raise Refused(400, f"{where}: content must be a string or a list of text parts, got {type(content).__name__}", param="messages")


def _arguments(call: Any, where: str) -> tuple[str, Any]:
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise Refused(400, f"{where}: a tool call must be {{\"type\": \"function\", \"function\": {{\"name\", \"arguments\"}}}}", param="messages")
    args = fn.get("arguments", "{}")
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except ValueError:
            raise Refused(400, f"{where}: the arguments of tool call {fn['name']!r} are not JSON", param="messages") from None
    return fn["name"], args


def check_messages(messages: Any) -> list[dict]:
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise Refused(400, "messages must be a non-empty list of message objects", param="messages")
    for i, m in enumerate(messages):
        if m.get("role") not in ("system", "developer", "user", "assistant", "tool"):
            raise Refused(400, f"messages[{i}].role must be system, developer, user, assistant or tool, got {m.get('role')!r}", param="messages")
    return messages


def history_key(m: dict, i: int) -> tuple:
    """What the model saw of message ``i``: equal keys render to the same tokens."""
    where = f"messages[{i}]"
    role = "system" if m["role"] == "developer" else m["role"]
    calls = tuple((n, json.dumps(a, sort_keys=True)) for n, a in (_arguments(c, where) for c in m.get("tool_calls") or []))
    return (role, text_of(m.get("content"), where), calls, m.get("tool_call_id") if role == "tool" else None)


def format_call(parser: Any, name: str, arguments: Any) -> str:
    """A tool call written in the run's format (the parser's ``start`` / ``end`` markers around the JSON object)."""
    start, end = getattr(parser, "start", None), getattr(parser, "end", None)
    if not (isinstance(start, str) and isinstance(end, str)):
        raise Refused(400, f"the run's tool-call format ({type(parser).__name__}) cannot write an assistant message's tool_calls back; "
                      "send them as the assistant's text instead", param="messages")
    return start + json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False) + end


def template_messages(messages: Sequence[dict], parser: Any, *, start: int = 0) -> list[dict]:
    """``messages[start:]`` as the chat template renders them (tool calls in the run's format, tool messages named)."""
    names: dict[str, str] = {}
    out = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        role = "system" if m["role"] == "developer" else m["role"]
        text = text_of(m.get("content"), where)
        if role == "assistant":
            for c in m.get("tool_calls") or []:
                name, args = _arguments(c, where)
                if isinstance(c.get("id"), str):
                    names[c["id"]] = name
                if i >= start:  # earlier messages are the session's own tokens: never rendered again
                    text += format_call(parser, name, args)
        msg = {"role": role, "content": text}
        if role == "tool":
            name = m.get("name") or names.get(m.get("tool_call_id") or "")
            if name:
                msg["name"] = name
        if i >= start:
            out.append(msg)
    return out


def check_tools(tools: Any) -> list[dict] | None:
    if tools is None or tools == []:
        return None
    if not isinstance(tools, list):
        raise Refused(400, "tools must be a list of {\"type\": \"function\", \"function\": {...}}", param="tools")
    for i, t in enumerate(tools):
        if not isinstance(t, dict) or t.get("type") != "function" or not isinstance(t.get("function"), dict) or not isinstance(t["function"].get("name"), str):
            raise Refused(400, f"tools[{i}] must be {{\"type\": \"function\", \"function\": {{\"name\", \"description\", \"parameters\"}}}}", param="tools")
    return tools


def tool_calls_json(calls: Sequence[ToolCall], call_id: str) -> list[dict]:
    return [{"id": f"{call_id}_{j}", "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)}}
            for j, c in enumerate(calls)]


def _usage(prompt: int, completion: int) -> dict:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _logprobs(tokens: Sequence[str], lps: Sequence[float] | None) -> dict | None:
    if lps is None:
        return None
    return {"content": [{"token": t, "logprob": float(lp), "bytes": list(t.encode("utf-8")), "top_logprobs": []} for t, lp in zip(tokens, lps)]}


def chat_completion(rid: str, model: str, content: str | None, calls: list[dict], finish: str, usage: tuple[int, int],
                    logprobs: dict | None = None) -> dict:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = calls
    choice = {"index": 0, "message": message, "finish_reason": finish, "logprobs": logprobs}
    return {"id": rid, "object": "chat.completion", "created": int(time.time()), "model": model, "choices": [choice], "usage": _usage(*usage)}


def chat_chunks(rid: str, model: str, content: str | None, calls: list[dict], finish: str, usage: tuple[int, int] | None,
                pieces: Sequence[str] = ()) -> list[dict]:
    """The chunks of a streamed chat completion: the role, the content in ``pieces`` (the decoded tokens), each tool
    call (its id and name, then its arguments), the finish reason, then the usage when asked for."""
    created = int(time.time())

    def chunk(delta: dict, finish_reason: str | None = None) -> dict:
        return {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}]}

    out = [chunk({"role": "assistant", "content": ""})]
    out += [chunk({"content": p}) for p in (pieces or ([content] if content else [])) if p]
    for j, c in enumerate(calls):
        out.append(chunk({"tool_calls": [{"index": j, "id": c["id"], "type": "function", "function": {"name": c["function"]["name"], "arguments": ""}}]}))
        out.append(chunk({"tool_calls": [{"index": j, "function": {"arguments": c["function"]["arguments"]}}]}))
    out.append(chunk({}, finish))
    if usage is not None:
        last = chunk({})
        last["choices"] = []
        last["usage"] = _usage(*usage)
        out.append(last)
    return out


def completion(rid: str, model: str, text: str, finish: str, usage: tuple[int, int], logprobs: dict | None = None) -> dict:
    return {"id": rid, "object": "text_completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "text": text, "finish_reason": finish, "logprobs": logprobs}], "usage": _usage(*usage)}


def completion_chunks(rid: str, model: str, pieces: Sequence[str], finish: str, usage: tuple[int, int] | None) -> list[dict]:
    created = int(time.time())
    out = [{"id": rid, "object": "text_completion", "created": created, "model": model,
            "choices": [{"index": 0, "text": p, "finish_reason": None, "logprobs": None}]} for p in pieces if p]
    out.append({"id": rid, "object": "text_completion", "created": created, "model": model, "choices": [{"index": 0, "text": "", "finish_reason": finish, "logprobs": None}]})
    if usage is not None:
        out.append({"id": rid, "object": "text_completion", "created": created, "model": model, "choices": [], "usage": _usage(*usage)})
    return out


def completion_logprobs(tokens: Sequence[str], lps: Sequence[float] | None) -> dict | None:
    if lps is None:
        return None
    return {"tokens": list(tokens), "token_logprobs": [float(x) for x in lps], "top_logprobs": None, "text_offset": None}


chat_logprobs = _logprobs
