"""Agent programs the tests run through the endpoint: each uses only the ``openai`` client, as a user's agent would.

Each is ``function(task) -> result`` (the ``callable`` mode, run in its own process by rl_agent_openai.child); what
a program saw comes back in its result (``extra_info["agent"]["result"]``) for the test to check.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import openai

TOOLS = [{"type": "function", "function": {"name": "count_chars", "description": "Count the characters of a text (TOOLDESC).",
                                           "parameters": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}}]


def _client(task, **kw):
    return openai.OpenAI(base_url=task["base_url"], api_key=task["api_key"], max_retries=0, timeout=120, **kw)


def three_calls(task):
    """Call 1 (tools, no stream) -> tool result -> call 2 (stream) -> a user message -> call 3 (no tools change)."""
    client = _client(task)
    messages = list(task["messages"])
    seen = []
    r1 = client.chat.completions.create(model="policy", messages=messages, tools=TOOLS, max_tokens=6, logprobs=True)
    m1 = r1.choices[0].message
    seen.append({"finish": r1.choices[0].finish_reason, "content": m1.content, "calls": [c.model_dump() for c in m1.tool_calls or []],
                 "usage": r1.usage.model_dump(), "logprobs": [c.logprob for c in r1.choices[0].logprobs.content]})
    messages.append(m1.model_dump(exclude_none=True))  # the assistant message as the client returned it
    for c in m1.tool_calls or []:
        messages.append({"role": "tool", "tool_call_id": c.id, "content": f"RESULT-{c.function.name}-42"})
    stream = client.chat.completions.create(model="policy", messages=messages, tools=TOOLS, max_tokens=5, stream=True,
                                            stream_options={"include_usage": True})
    content, calls, finish, usage, n_chunks = "", {}, None, None, 0
    for chunk in stream:
        n_chunks += 1
        if chunk.usage is not None:
            usage = chunk.usage.model_dump()
        for ch in chunk.choices:
            content += ch.delta.content or ""
            for tc in ch.delta.tool_calls or []:
                slot = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
                slot["id"] = tc.id or slot["id"]
                if tc.function is not None:
                    slot["name"] += tc.function.name or ""
                    slot["arguments"] += tc.function.arguments or ""
            finish = ch.finish_reason or finish
    seen.append({"finish": finish, "content": content, "calls": list(calls.values()), "usage": usage, "chunks": n_chunks})
    messages.append({"role": "assistant", "content": content or None,
                     "tool_calls": [{"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}} for c in calls.values()]})
    for c in calls.values():
        messages.append({"role": "tool", "tool_call_id": c["id"], "content": "SECOND-RESULT"})
    messages.append({"role": "user", "content": "USER-NUDGE: answer now."})
    r3 = client.chat.completions.create(model="policy", messages=messages, tools=TOOLS, max_tokens=4)
    seen.append({"finish": r3.choices[0].finish_reason, "content": r3.choices[0].message.content, "usage": r3.usage.model_dump()})
    return {"reward": 0.5, "seen": seen, "messages": messages}


def plain(task):
    """One call without tools; returns the text (the stop tests compare two of these)."""
    client = _client(task)
    stop = os.environ.get("TEST_STOP")
    r = client.chat.completions.create(model="policy", messages=task["messages"], max_tokens=24, **({"stop": [stop]} if stop else {}))
    return {"text": r.choices[0].message.content, "finish": r.choices[0].finish_reason}


def completions(task):
    """/v1/completions: a text prompt, streamed; then the same session extended by text; then a token-id session call."""
    client = _client(task)
    r1 = client.completions.create(model="policy", prompt="Once upon", max_tokens=5)
    t1 = r1.choices[0].text
    text = ""
    for chunk in client.completions.create(model="policy", prompt="Once upon" + t1 + " AGENT-TEXT", max_tokens=4, stream=True):
        for ch in chunk.choices:
            text += ch.text or ""
    bad = None
    try:
        client.completions.create(model="policy", prompt="A different start", max_tokens=3)
    except openai.BadRequestError as exc:
        bad = {"status": exc.status_code, "message": str(exc)}
    return {"t1": t1, "t2": text, "rewrite": bad}


def refusals(task):
    """Each call the endpoint must refuse, with the status and message the client raised."""
    out = {}
    good = _client(task)
    bad_key = openai.OpenAI(base_url=task["base_url"], api_key="not-the-token", max_retries=0)
    calls = {
        "loose_temperature": lambda: good.chat.completions.create(model="p", messages=task["messages"], temperature=1.5, max_tokens=2),
        "two_samples": lambda: good.chat.completions.create(model="p", messages=task["messages"], n=2, max_tokens=2),
        "forced_tool": lambda: good.chat.completions.create(model="p", messages=task["messages"], tools=TOOLS, tool_choice="required", max_tokens=2),
        "wrong_token": lambda: bad_key.chat.completions.create(model="p", messages=task["messages"], max_tokens=2),
        "no_session": lambda: openai.OpenAI(base_url=task["base_url"].rsplit("/s/", 1)[0] + "/v1", api_key=task["api_key"], max_retries=0)
        .chat.completions.create(model="p", messages=task["messages"], max_tokens=2),
    }
    for name, call in calls.items():
        try:
            call()
            out[name] = {"status": 200}
        except openai.APIStatusError as exc:
            out[name] = {"status": exc.status_code, "message": str(exc)}
    r = good.chat.completions.create(model="p", messages=task["messages"], max_tokens=3, temperature=1.0)  # the run's own: served
    out["same_temperature"] = {"status": 200, "finish": r.choices[0].finish_reason}
    rewritten = [{"role": "user", "content": "a rewritten history"}]
    try:
        good.chat.completions.create(model="p", messages=rewritten, max_tokens=2)
        out["rewrite"] = {"status": 200}
    except openai.APIStatusError as exc:
        out["rewrite"] = {"status": exc.status_code, "message": str(exc)}
    return {"reward": 1.0, "refusals": out}


def _record_pid(extra: int | None = None):
    folder = os.environ["PID_DIR"]
    with open(os.path.join(folder, f"{os.getpid()}.pid"), "w") as f:
        f.write(f"{os.getpid()} {extra or ''}")


def crashes(task):
    _client(task).chat.completions.create(model="p", messages=task["messages"], max_tokens=2)
    raise RuntimeError("the agent crashed")


def hangs(task):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])  # left running: must be killed too
    _record_pid(child.pid)
    time.sleep(3600)


def eats_memory(task):
    _record_pid()
    hog = bytearray(3 * 1024**3)  # 3 GiB: beyond memory_mb, a MemoryError
    return len(hog)


def floods_output(task):
    _record_pid()
    while True:
        sys.stdout.write("x" * 65536)


def floods_calls(task):
    _record_pid()
    client = _client(task)
    while True:
        try:
            client.chat.completions.create(model="p", messages=[{"role": "user", "content": "again"}], max_tokens=1)
        except openai.APIStatusError:
            pass


def returns_nothing(task):
    _client(task).chat.completions.create(model="p", messages=task["messages"], max_tokens=2)
    return {"note": "no reward"}


def dump(obj):  # for debugging a failing test: print what a program saw
    print(json.dumps(obj, indent=1))


def mixed(task):
    """Even rows: two calls (the second extends the first with a user message), reward 1; odd rows: a crash before
    any call (an empty trajectory)."""
    if task["index"] % 2:
        raise RuntimeError("the agent crashed")
    client = _client(task)
    messages = list(task["messages"])
    r = client.chat.completions.create(model="p", messages=messages, max_tokens=3)
    messages += [r.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": "go on"}]
    client.chat.completions.create(model="p", messages=messages, max_tokens=3)
    return 1.0
