"""One trajectory's calls: the exact tokens in and out of each, and how a call extends the one before it.

A session's first call fixes the trajectory's prompt: the chat template's rendering of the request's messages
(with its ``tools``), or a completion's prompt (text, tokenized once; or token ids, taken as they are). Every
later call must extend the conversation as the session left it:

- chat: the request's messages start with the previous request's messages followed by the assistant message
  the endpoint returned (compared as :func:`~rl_agent_openai.openai_format.history_key`: role, text, tool calls,
  the call a tool message answers; the ids and extra fields a client adds are ignored), with the same ``tools``;
  the new messages are appended as the chat template's delta after the sampled tokens
  (:meth:`rl_agent.chat.ChatDelta.inserted_ids`: only what the template puts after the last assistant turn);
- completions: the prompt starts with the previous prompt plus the text returned (text prompts), or with the
  previous call's token ids plus the sampled ids (token-id prompts); the rest is tokenized as is.

So the engine always continues the trajectory's own token ids: the sampled tokens are never re-tokenized, and
what the agent put between calls is the only inserted text (``response_mask`` 0, log-prob 0). A call that does
not extend the session (the agent rewrote or forked its history, changed the tools, or mixed chat and
completions) is **refused** with HTTP 400 (code ``history_rewritten``) and the trajectory so far is kept: one
trajectory is one conversation, and a second one has no row in the batch to be trained in.
"""

from __future__ import annotations

import threading
from typing import Any, Sequence

import attrs

from rl_agent_openai.openai_format import Refused, history_key, template_messages


@attrs.define
class Call:
    """One engine call: the ids it saw (the whole trajectory so far) and the ids it sampled."""

    prompt_ids: list[int]
    output_ids: list[int]
    log_probs: list[float] | None
    inserted: int  # the prompt's last ``inserted`` ids are new in this call (the agent's text / template), masked
    finish_reason: str  # the engine's: eos, stop, length
    kind: str  # chat, completion


@attrs.define
class Pending:
    """A call planned but not decoded yet (what :meth:`Session.commit` records once the engine answers)."""

    ids: list[int]
    inserted: list[int]
    budget: int
    kind: str
    history: tuple | None = None  # chat: the request's history keys
    messages: list | None = None  # chat: the request's messages
    text: str | None = None  # completions with a text prompt: the prompt
    tokens_mode: bool = False
    tools_key: str | None = None


class Session:
    """One trajectory: its calls, in order, and the response built from them (``mask`` 1 on sampled ids)."""

    def __init__(self, sid: str, index: int, row_prompt_ids: Sequence[int], budget: int, max_calls: int) -> None:
        self.sid, self.index, self.budget, self.max_calls = sid, index, int(budget), int(max_calls)
        self.row_prompt_ids = [int(i) for i in row_prompt_ids]
        self.lock = threading.Lock()
        self.busy = False
        self.prompt_ids: list[int] | None = None
        self.response_ids: list[int] = []
        self.mask: list[int] = []
        self.log_probs: list[float] = []
        self.calls: list[Call] = []
        self.refused: list[str] = []
        self.kind: str | None = None
        self.tools_key: str | None = None
        self.history: tuple = ()
        self.messages: list = []  # the conversation as the agent last sent it, plus the reply (extra_info["messages"])
        self.text: str | None = None
        self.tokens_mode = False
        self.ended_with_eos = False
        self.attempts = 0
        self.closed = False  # the rollout call has ended: a late answer is not recorded

    # -- planning a call ------------------------------------------------------------------------------------------
    def _room(self, inserted: int) -> int:
        room = self.budget - len(self.response_ids) - inserted
        if room <= 0:
            raise Refused(400, f"this trajectory's response budget (data.max_response_length={self.budget} tokens, sampled and "
                          f"inserted together) is spent: {len(self.response_ids)} used, {inserted} more in this request's new messages",
                          code="context_length_exceeded")
        return room

    def _start(self, kind: str, tools_key: str | None) -> None:
        if self.kind is None:
            return
        if kind != self.kind:
            raise Refused(400, f"this session's calls are {self.kind} calls; a {kind} call cannot extend them (one session is one conversation)",
                          code="history_rewritten")
        if tools_key != self.tools_key:
            raise Refused(400, "the tools differ from this session's first call; the model's prompt would change under it", code="history_rewritten", param="tools")

    def plan_chat(self, messages: list[dict], tools: list[dict] | None, tools_key: str, chat: Any, parser: Any) -> Pending:
        keys = tuple(history_key(m, i) for i, m in enumerate(messages))
        self._start("chat", tools_key)
        if self.kind is None:
            text = chat.render(template_messages(messages, parser), add_generation_prompt=True)
            ids = [int(i) for i in chat.tokenizer.encode(text, add_special_tokens=False)]
            return Pending(ids=ids, inserted=[], budget=self._room(0), kind="chat", history=keys, messages=messages, tools_key=tools_key)
        prev = self.history
        if len(keys) <= len(prev) or keys[: len(prev)] != prev:
            at = next((i for i, (a, b) in enumerate(zip(keys, prev)) if a != b), min(len(keys), len(prev)))
            raise Refused(400, f"the messages do not extend this session's conversation (they differ from it at messages[{at}]; "
                          f"{len(prev)} messages, the endpoint's last reply included, must come first, then new ones). "
                          "A rewritten history is refused: start a new session for a new conversation", code="history_rewritten", param="messages")
        new = template_messages(messages, parser, start=len(prev))
        inserted = [int(i) for i in chat.inserted_ids(new, ended_with_eos=self.ended_with_eos)]
        budget = self._room(len(inserted))
        return Pending(ids=self.prompt_ids + self.response_ids + inserted, inserted=inserted, budget=budget, kind="chat", history=keys, messages=messages,
                       tools_key=tools_key)

    def plan_completion(self, prompt: Any, tokenizer: Any) -> Pending:
        tokens_mode = isinstance(prompt, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in prompt)
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if not tokens_mode and not isinstance(prompt, str):
            raise Refused(400, "prompt must be a string or a list of token ids (one prompt per request)", param="prompt")
        if not prompt:
            raise Refused(400, "prompt is empty", param="prompt")
        self._start("completion", None)
        if self.kind is not None and tokens_mode != self.tokens_mode:
            raise Refused(400, "this session's prompts were " + ("token ids" if self.tokens_mode else "text") + "; keep one kind", code="history_rewritten", param="prompt")
        if self.kind is None:
            ids = list(prompt) if tokens_mode else [int(i) for i in tokenizer.encode(prompt)]
            vocab = len(tokenizer)
            if any(i < 0 or i >= vocab for i in ids):
                raise Refused(400, f"a prompt token id is outside the vocabulary (0..{vocab - 1})", param="prompt")
            return Pending(ids=ids, inserted=[], budget=self._room(0), kind="completion", text=None if tokens_mode else prompt, tokens_mode=tokens_mode)
        if tokens_mode:
            have = self.prompt_ids + self.response_ids
            if prompt[: len(have)] != have:
                raise Refused(400, "the prompt's token ids do not start with this session's ids (the previous prompt and the sampled ids); "
                              "a rewritten history is refused", code="history_rewritten", param="prompt")
            inserted = list(prompt[len(have) :])
        else:
            if not prompt.startswith(self.text):
                raise Refused(400, "the prompt does not start with this session's text (the previous prompt and the text returned); "
                              "a rewritten history is refused", code="history_rewritten", param="prompt")
            rest = prompt[len(self.text) :]
            inserted = [int(i) for i in tokenizer.encode(rest, add_special_tokens=False)] if rest else []
        budget = self._room(len(inserted))
        return Pending(ids=self.prompt_ids + self.response_ids + inserted, inserted=inserted, budget=budget, kind="completion",
                       text=None if tokens_mode else prompt, tokens_mode=tokens_mode)

    # -- recording the engine's answer ----------------------------------------------------------------------------
    def commit(self, plan: Pending, out_ids: Sequence[int], log_probs: Sequence[float] | None, finish: str, *, eos_ids: frozenset,
               reply: dict | None = None, returned_text: str | None = None) -> None:
        out_ids = [int(i) for i in out_ids]
        if self.closed:
            raise Refused(503, "the rollout call has ended; this answer was not recorded", code="engine_unavailable")
        if self.prompt_ids is None:
            self.prompt_ids = list(plan.ids)
            self.kind = plan.kind
            self.tokens_mode = plan.tokens_mode
            self.tools_key = plan.tools_key
        self.response_ids += plan.inserted + out_ids
        self.mask += [0] * len(plan.inserted) + [1] * len(out_ids)
        self.log_probs += [0.0] * len(plan.inserted) + ([float(x) for x in log_probs] if log_probs is not None else [0.0] * len(out_ids))
        self.calls.append(Call(list(plan.ids), out_ids, None if log_probs is None else [float(x) for x in log_probs], len(plan.inserted), finish, plan.kind))
        self.ended_with_eos = bool(out_ids) and out_ids[-1] in eos_ids
        if plan.kind == "chat":
            self.history = plan.history + (history_key(reply, len(plan.history)),)
            self.messages = list(plan.messages) + [reply]
        elif not plan.tokens_mode:
            self.text = plan.text + (returned_text or "")

    def close(self) -> tuple[list[int], list[int], list[int], list[float]]:
        """End the session (later answers are not recorded) and return (prompt ids, response ids, response mask,
        log-probs); a session without a call keeps the row's prompt."""
        with self.lock:
            self.closed = True
            prompt = self.prompt_ids if self.prompt_ids is not None else self.row_prompt_ids
            return list(prompt), list(self.response_ids), list(self.mask), list(self.log_probs)
