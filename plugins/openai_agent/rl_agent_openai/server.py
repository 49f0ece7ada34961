"""The OpenAI-compatible endpoint: ``/v1/chat/completions`` and ``/v1/completions`` on loopback, answered by the run's
rollout engine.

- **Where**: ``127.0.0.1`` on a free port, started for one rollout call and closed after it (nothing listens
  between steps, nothing on another interface). Standard library only (``http.server``, one thread per request).
- **Who**: every request carries the run's secret token (``Authorization: Bearer <token>``, a fresh
  ``secrets.token_urlsafe(32)`` per rollout call, compared in constant time; wrong or missing: 401) and a session
  id, the trajectory it belongs to: in the base URL (``http://127.0.0.1:PORT/s/<session>/v1``, what the program
  gets as ``OPENAI_BASE_URL``) or in an ``X-Session-Id`` header with ``/v1/...``; unknown: 404.
- **What it samples**: the run's settings, which a request cannot loosen. ``temperature`` / ``top_p`` / ``top_k``
  other than the run's (``rollout.temperature`` etc., ``val_*`` in validation) are refused with 400 and the
  reason (code ``sampling_not_allowed``): the trained tokens must come from the policy's own sampling. ``n`` other
  than 1, penalties, ``logit_bias``, a JSON ``response_format`` and a forced ``tool_choice`` are refused the same
  way. ``max_tokens`` / ``max_completion_tokens`` can only lower the per-call cap (``max_tokens_per_turn``, the
  trajectory's remaining budget); ``stop`` strings are added to the run's ``rollout.stop``; ``seed`` is ignored.
- **Tools**: the request's ``tools`` (OpenAI format) are rendered by the chat template; the model's tool calls are
  parsed back with the run's format (``rollout.multi_turn.format``, e.g. ``hermes``) into ``tool_calls``. With
  tools (and ``stop_at_tool_call_end``) a turn also ends at the format's end-of-call text.
- **Streaming** (``stream: true``): server-sent events in OpenAI's chunk format, ending ``data: [DONE]``; the turn
  is decoded in the engine's batch first, then sent (role, content pieces, tool calls, finish reason, usage when
  ``stream_options.include_usage``).
- **Floods**: a body over ``max_request_bytes`` gets 413; a session's calls beyond ``max_calls`` get 429 and end
  the program (scored as a failure); a second call of a session while one is running gets 409.
"""

from __future__ import annotations

import hmac
import json
import queue
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

import attrs
from rl_agent.chat import ChatDelta

from rl_agent_openai.openai_format import (
    Refused,
    chat_chunks,
    chat_completion,
    chat_logprobs,
    check_messages,
    check_tools,
    completion,
    completion_chunks,
    completion_logprobs,
    tool_calls_json,
)
from rl_agent_openai.session import Session

LOOPBACK = "127.0.0.1"
MODEL_NAME = "rl-core-policy"


@attrs.frozen
class RunSampling:
    """What the run samples with in this rollout call (a request may tighten only the caps and stop strings)."""

    temperature: float
    top_p: float
    top_k: int
    stop: tuple[str, ...]
    max_tokens_per_turn: int | None
    tool_stop: tuple[str, ...]  # the format's end-of-call strings, when stop_at_tool_call_end

    @classmethod
    def of(cls, params, mt, parser) -> "RunSampling":
        greedy = bool(getattr(params, "greedy", False))
        return cls(temperature=0.0 if greedy else float(params.temperature), top_p=1.0 if greedy else float(params.top_p),
                   top_k=-1 if greedy or params.top_k <= 0 else int(params.top_k), stop=tuple(params.stop),
                   max_tokens_per_turn=mt.max_tokens_per_turn, tool_stop=tuple(getattr(parser, "stop", ())) if mt.stop_at_tool_call_end else ())


@attrs.define
class Request:
    """One call waiting for the engine: the ids it continues, its token budget and stop strings."""

    ids: list[int]
    budget: int
    stop: tuple[str, ...]
    done: threading.Event = attrs.field(factory=threading.Event)
    result: Any = None
    error: BaseException | None = None


def _same(a: float, b: float) -> bool:
    return abs(float(a) - float(b)) <= 1e-6


def sampling_caps(body: dict, run: RunSampling, *, chat: bool) -> tuple[int | None, tuple[str, ...]]:
    """The request's per-call token cap and extra stop strings; a 400 for anything that would change the sampling."""
    def refuse(param: str, msg: str):
        raise Refused(400, msg, code="sampling_not_allowed", param=param)

    t = body.get("temperature")
    if t is not None:
        if isinstance(t, bool) or not isinstance(t, (int, float)):
            refuse("temperature", f"temperature must be a number, got {t!r}")
        if not _same(t, run.temperature):
            how = "looser than" if t > run.temperature else "different from"
            refuse("temperature", f"temperature {t} is {how} the run's {run.temperature} (rollout.temperature, or rollout.val_temperature in "
                   "validation): this endpoint samples with the run's settings so that the trained tokens come from the policy being trained; "
                   f"omit temperature or send {run.temperature}")
    p = body.get("top_p")
    if p is not None and (isinstance(p, bool) or not isinstance(p, (int, float)) or not _same(p, run.top_p)):
        refuse("top_p", f"top_p {p!r} differs from the run's {run.top_p} (rollout.top_p / val_top_p); omit it or send {run.top_p}")
    k = body.get("top_k")
    if k is not None and not ((k in (-1, 0) and run.top_k == -1) or k == run.top_k):
        refuse("top_k", f"top_k {k!r} differs from the run's {run.top_k} (rollout.top_k / val_top_k); omit it")
    n = body.get("n")
    if n is not None and n != 1:
        refuse("n", f"n={n!r}: one completion per call (a trajectory is one conversation); the run's rollout.n sets the samples per prompt")
    for key in ("presence_penalty", "frequency_penalty"):
        if body.get(key) not in (None, 0, 0.0):
            refuse(key, f"{key}={body.get(key)!r} changes the sampling distribution; omit it")
    if body.get("logit_bias"):
        refuse("logit_bias", "logit_bias changes the sampling distribution; omit it")
    fmt = body.get("response_format")
    if fmt is not None and not (isinstance(fmt, dict) and fmt.get("type") == "text"):
        refuse("response_format", "structured output (response_format) is not served: it would change what the policy samples")
    tc = body.get("tool_choice")
    if chat and tc not in (None, "auto", "none"):
        refuse("tool_choice", f"tool_choice={tc!r} would force the policy's output; use \"auto\" (or omit it)")
    cap = None
    for key in ("max_tokens", "max_completion_tokens"):
        v = body.get(key)
        if v is not None:
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise Refused(400, f"{key} must be a positive integer, got {v!r}", param=key)
            cap = v if cap is None else min(cap, v)
    stop = body.get("stop")
    if stop is None:
        extra: tuple[str, ...] = ()
    elif isinstance(stop, str):
        extra = (stop,)
    elif isinstance(stop, list) and all(isinstance(s, str) and s for s in stop) and len(stop) <= 16:
        extra = tuple(stop)
    else:
        raise Refused(400, f"stop must be a string or a list of up to 16 non-empty strings, got {stop!r:.80}", param="stop")
    return cap, extra


def stream_pieces(decode: Callable[[list[int]], str], ids: list[int], text: str) -> list[str]:
    """``text`` in pieces at token boundaries (a piece never ends inside a character a later token completes); their
    concatenation is ``text``. Text not made of ``ids`` alone (cut or parsed) or over 512 tokens: 16-character pieces."""
    if len(ids) > 512 or decode(ids) != text:
        return [text[i : i + 16] for i in range(0, len(text), 16)]
    pieces, sent = [], ""
    for k in range(1, len(ids) + 1):
        t = decode(ids[:k])
        if t.endswith("\ufffd") or not t.startswith(sent) or not text.startswith(t):
            continue
        if t != sent:
            pieces.append(t[len(sent) :])
            sent = t
    if sent != text:
        pieces.append(text[len(sent) :])
    return pieces


def cut_text(text: str, stops: tuple[str, ...]) -> tuple[str, bool]:
    """``text`` before the first of ``stops`` (OpenAI leaves the stop string out of the returned text)."""
    at = min((i for i in (text.find(s) for s in stops) if i >= 0), default=-1)
    return (text[:at], True) if at >= 0 else (text, False)


class Endpoint:
    """The sessions of one rollout call and what their requests need (tokenizer, parser, the run's sampling)."""

    def __init__(self, *, tokenizer, parser, run: RunSampling, sessions: dict[str, Session], eos_ids, max_request_bytes: int,
                 submit: Callable[[Request], None], on_flood: Callable[[Session], None] = lambda s: None, timeout_s: float = 600.0) -> None:
        self.tokenizer, self.parser, self.run = tokenizer, parser, run
        self.sessions = sessions
        self.eos_ids = frozenset(int(i) for i in eos_ids)
        self.max_request_bytes = int(max_request_bytes)
        self.submit, self.on_flood, self.timeout_s = submit, on_flood, timeout_s
        self.token = ""
        self._chats: dict[str, ChatDelta] = {}
        self._chat_lock = threading.Lock()
        self.closed = threading.Event()
        self.tools_ignored = False  # a request's tools did not change the template's rendering

    def chat(self, tools: list[dict] | None) -> tuple[ChatDelta, str]:
        key = json.dumps(tools, sort_keys=True)
        with self._chat_lock:
            if key not in self._chats:
                self._chats[key] = delta = ChatDelta(self.tokenizer, tools)
                if tools:  # a template without tool support renders nothing of them: say so (agent/tools_ignored_by_template)
                    probe = [{"role": "user", "content": "x"}]
                    plain = self.tokenizer.apply_chat_template(probe, tokenize=False, add_generation_prompt=True)
                    self.tools_ignored = self.tools_ignored or delta.render(probe, add_generation_prompt=True) == plain
            return self._chats[key], key

    def decode(self, ids) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)

    # -- one call ---------------------------------------------------------------------------------------------------
    def handle(self, path_kind: str, session: Session, body: dict) -> tuple[dict | None, list[dict] | None]:
        """The response body (or the stream's chunks) for one call of ``session``."""
        chat = path_kind == "chat"
        cap, extra_stop = sampling_caps(body, self.run, chat=chat)
        stream = bool(body.get("stream"))
        usage_in_stream = bool((body.get("stream_options") or {}).get("include_usage"))
        if chat:
            messages = check_messages(body.get("messages"))
            tools = check_tools(body.get("tools"))
            parse_tools = tools is not None and body.get("tool_choice") != "none"
            delta, key = self.chat(tools)
            with session.lock:
                plan = session.plan_chat(messages, tools, key, delta, self.parser)
            stop = tuple(dict.fromkeys(self.run.stop + extra_stop + (self.run.tool_stop if parse_tools else ())))
        else:
            with session.lock:
                plan = session.plan_completion(body.get("prompt"), self.tokenizer)
            stop = tuple(dict.fromkeys(self.run.stop + extra_stop))
        budget = plan.budget
        for c in (cap, self.run.max_tokens_per_turn):
            if c is not None:
                budget = min(budget, c)
        req = Request(ids=plan.ids, budget=budget, stop=stop)
        self.submit(req)
        if not req.done.wait(self.timeout_s) or req.error is not None:
            raise Refused(503, f"the rollout engine did not answer this call ({req.error or 'the rollout ended'})", code="engine_unavailable")
        out = req.result
        ids = list(out.token_ids)
        body_ids = ids[:-1] if ids and ids[-1] in self.eos_ids else ids
        text = self.decode(body_ids)
        finish = "length" if out.finish_reason == "length" else "stop"
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}"
        usage = (len(plan.ids), len(ids))
        if chat:
            calls_json: list[dict] = []
            content = text
            if parse_tools:
                parsed, calls = self.parser.parse(text)
                if calls and not any(c.error for c in calls):
                    calls_json = tool_calls_json(calls, f"call_{session.sid[:8]}_{len(session.calls)}")
                    content, finish = parsed, "tool_calls"
            content, cut = cut_text(content, extra_stop)
            reply = {"role": "assistant", "content": content or None}
            if calls_json:
                reply["tool_calls"] = calls_json
            with session.lock:
                session.commit(plan, ids, out.log_probs, out.finish_reason, eos_ids=self.eos_ids, reply=reply)
            lp = chat_logprobs([self.decode([i]) for i in ids], out.log_probs) if body.get("logprobs") else None
            if stream:
                pieces = stream_pieces(self.decode, body_ids, content or "")
                return None, chat_chunks(rid, MODEL_NAME, content or None, calls_json, finish, usage if usage_in_stream else None, pieces)
            return chat_completion(rid, MODEL_NAME, content or None, calls_json, finish, usage, lp), None
        returned, cut = cut_text(text, extra_stop)
        with session.lock:
            session.commit(plan, ids, out.log_probs, out.finish_reason, eos_ids=self.eos_ids, returned_text=returned)
        lp = completion_logprobs([self.decode([i]) for i in ids], out.log_probs) if body.get("logprobs") else None
        if stream:
            pieces = stream_pieces(self.decode, body_ids, returned)
            return None, completion_chunks(rid, MODEL_NAME, pieces, finish, usage if usage_in_stream else None)
        return completion(rid, MODEL_NAME, returned, finish, usage, lp), None


class _Handler(BaseHTTPRequestHandler):
    server_version = "rl-core-openai-endpoint"
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # no access log (and never the token)
        pass

    @property
    def endpoint(self) -> Endpoint:
        return self.server.endpoint  # type: ignore[attr-defined]

    def _send(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, chunks: list[dict]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        for c in chunks:
            self.wfile.write(b"data: " + json.dumps(c).encode() + b"\n\n")
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True

    def _route(self) -> tuple[str | None, str | None]:
        """(session id, route) from ``/s/<sid>/v1/<route>`` or ``/v1/<route>`` + ``X-Session-Id``."""
        path = self.path.split("?", 1)[0].rstrip("/")
        sid = None
        if path.startswith("/s/"):
            parts = path.split("/", 3)
            if len(parts) < 4:
                return None, None
            sid, path = parts[2], "/" + parts[3]
        else:
            sid = self.headers.get("X-Session-Id")
        route = {"/v1/chat/completions": "chat", "/v1/completions": "completion", "/v1/models": "models"}.get(path)
        return sid, route

    def _authorized(self) -> bool:
        auth = self.headers.get("Authorization") or ""
        given = auth[7:].strip() if auth.startswith("Bearer ") else ""
        return bool(self.endpoint.token) and hmac.compare_digest(given.encode(), self.endpoint.token.encode())

    def _refuse(self, r: Refused) -> None:
        self._send(r.status, r.body())

    def do_GET(self):  # noqa: N802 - http.server's name
        if not self._authorized():
            return self._refuse(Refused(401, "missing or wrong API key (Authorization: Bearer <the token the program was given>)", code="invalid_api_key"))
        _, route = self._route()
        if route != "models":
            return self._refuse(Refused(404, f"no route GET {self.path.split('?')[0]}", code="not_found"))
        self._send(200, {"object": "list", "data": [{"id": MODEL_NAME, "object": "model", "created": 0, "owned_by": "rl-core"}]})

    def do_POST(self):  # noqa: N802
        ep = self.endpoint
        if not self._authorized():
            self.close_connection = True
            return self._refuse(Refused(401, "missing or wrong API key (Authorization: Bearer <the token the program was given>)", code="invalid_api_key"))
        sid, route = self._route()
        if route not in ("chat", "completion"):
            self.close_connection = True
            return self._refuse(Refused(404, f"no route POST {self.path.split('?')[0]} (served: /v1/chat/completions, /v1/completions)", code="not_found"))
        session = ep.sessions.get(sid or "")
        if session is None:
            self.close_connection = True
            return self._refuse(Refused(404, "unknown session: put the session id in the base URL (/s/<session>/v1) or the X-Session-Id header", code="unknown_session"))
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0 or length > ep.max_request_bytes:
            self.close_connection = True
            return self._refuse(Refused(413, f"the request body has {length} bytes, more than {ep.max_request_bytes} (rollout.multi_turn.program.max_request_bytes)", code="request_too_large"))
        raw = self.rfile.read(length)
        with session.lock:
            session.attempts += 1
            over = session.attempts > session.max_calls
            busy = session.busy
            if not over and not busy:
                session.busy = True
        if over:
            ep.on_flood(session)
            return self._refuse(Refused(429, f"this session made more than {session.max_calls} calls (rollout.multi_turn.program.max_calls); "
                                        "the program is stopped and scored as a failure", code="too_many_calls"))
        if busy:
            return self._refuse(Refused(409, "this session has a call running; a session's calls are one conversation, one at a time", code="session_busy"))
        try:
            try:
                body = json.loads(raw or b"{}")
            except ValueError as exc:
                raise Refused(400, f"the request body is not JSON: {exc}", code="invalid_json") from None
            if not isinstance(body, dict):
                raise Refused(400, "the request body must be a JSON object", code="invalid_json")
            result, chunks = ep.handle(route, session, body)
        except Refused as r:
            session.refused.append(f"{r.status} {r.code}: {r.message}"[:300])
            return self._refuse(r)
        except Exception as exc:  # noqa: BLE001 - the program gets a 500 naming the error; the rollout goes on
            session.refused.append(f"500: {type(exc).__name__}: {exc}"[:300])
            return self._refuse(Refused(500, f"the endpoint failed on this call: {type(exc).__name__}: {exc}", code="server_error"))
        finally:
            with session.lock:
                session.busy = False
        if chunks is not None:
            return self._stream(chunks)
        self._send(200, result)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = False
    request_queue_size = 256  # every program of a rollout call may connect at once

    def handle_error(self, request, client_address):  # a killed program's broken connection: nothing to print
        pass


def serve(endpoint: Endpoint, token: str) -> tuple[_Server, str]:
    """Start serving ``endpoint`` on loopback (a free port) in a daemon thread; returns the server and its root URL."""
    endpoint.token = token
    server = _Server((LOOPBACK, 0), _Handler)
    server.endpoint = endpoint  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="rl-core-openai-endpoint", daemon=True).start()
    host, port = server.server_address[:2]
    return server, f"http://{host}:{port}"


def stop(server: _Server) -> None:
    server.shutdown()
    server.server_close()


class RequestQueue:
    """The calls waiting for the engine, consumed on the engine's thread (:meth:`take` batches them)."""

    def __init__(self) -> None:
        self.q: queue.Queue[Request] = queue.Queue()

    def put(self, req: Request) -> None:
        self.q.put(req)

    def take(self, live: Callable[[], int], wait_s: float, poll_s: float = 0.02) -> list[Request]:
        """The calls to decode together: after the first, more until every live program has one waiting, or no new
        one came for ``wait_s`` (each arrival waits again, up to ``20 * wait_s`` in all); [] when none came within
        ``poll_s``."""
        try:
            first = self.q.get(timeout=poll_s)
        except queue.Empty:
            return []
        batch = [first]
        start = time.monotonic()
        deadline = start + wait_s
        while len(batch) < live():
            now = time.monotonic()
            left = min(deadline, start + 20 * wait_s) - now
            if left <= 0:
                break
            try:
                batch.append(self.q.get(timeout=min(left, poll_s)))
                deadline = time.monotonic() + wait_s
            except queue.Empty:
                continue
        while True:
            try:
                batch.append(self.q.get_nowait())
            except queue.Empty:
                return batch

    def drain(self) -> list[Request]:
        out = []
        while True:
            try:
                out.append(self.q.get_nowait())
            except queue.Empty:
                return out
