"""Between turns: the tokens the chat template inserts, and the check of a whole trajectory against it.

Nothing the model sampled is ever re-tokenized. After an assistant turn the
loop appends *only* the template's text that follows that turn: the end of
the assistant message, the tool messages, and the next generation prompt.
That text is the delta of the template's rendering, anchored on a sentinel:
``[user, assistant(SENTINEL)] + new messages`` is rendered (with the same
``tools``) and everything after the sentinel is taken. Because only what
follows the sentinel is used, templates that are not append-only (ones that
rewrite the system prompt, or drop the reasoning of earlier turns, as
Qwen3's does) still give the right delta: the rewritten part lies before the
sentinel. When the turn ended with the EOS token and the delta starts with
that token's text, it is not inserted twice.

:func:`token_check` renders the final messages with the template and
compares the text with the trajectory's tokens decoded; it returns ``None``
when they agree, else a message naming the first character where they
differ. The trajectory's *tokens* are exact by construction (sampled ids plus
inserted ids); text differences show a template the model will see
differently at inference.
"""

from __future__ import annotations

from typing import Any, Sequence

SENTINEL = "\u2063RLCORE-SENTINEL\u2063"


class ChatDelta:
    """Template deltas for one tokenizer and tool list (cached closing text per message shape)."""

    def __init__(self, tokenizer: Any, tools: list[dict] | None = None) -> None:
        self.tokenizer = tokenizer
        self.tools = tools or None
        eos = tokenizer.eos_token
        self.eos_text = eos if isinstance(eos, str) else None

    def render(self, messages: Sequence[dict], *, add_generation_prompt: bool) -> str:
        kwargs = {"tools": self.tools} if self.tools else {}
        return self.tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=add_generation_prompt, **kwargs)

    def delta_text(self, new_messages: Sequence[dict], *, ended_with_eos: bool) -> str:
        base = [{"role": "user", "content": "x"}, {"role": "assistant", "content": SENTINEL}]
        text = self.render(base + list(new_messages), add_generation_prompt=True)
        at = text.find(SENTINEL)
        if at < 0:
            raise ValueError("the chat template dropped an assistant message's content; it cannot be used for multi-turn rollouts")
        delta = text[at + len(SENTINEL) :]
        if ended_with_eos and self.eos_text and delta.startswith(self.eos_text):
            delta = delta[len(self.eos_text) :]
        return delta

    def inserted_ids(self, new_messages: Sequence[dict], *, ended_with_eos: bool) -> list[int]:
        """The token ids to append after an assistant turn for ``new_messages`` (tool results) and the next prompt."""
        return list(self.tokenizer.encode(self.delta_text(new_messages, ended_with_eos=ended_with_eos), add_special_tokens=False))

    def closing_text(self, *, ended_with_eos: bool) -> str:
        """The text that closes a final assistant turn (e.g. ``<|im_end|>\n``); never appended to a trajectory."""
        base = [{"role": "user", "content": "x"}, {"role": "assistant", "content": SENTINEL}]
        text = self.render(base, add_generation_prompt=False)
        tail = text[text.find(SENTINEL) + len(SENTINEL) :]
        if ended_with_eos and self.eos_text and tail.startswith(self.eos_text):
            tail = tail[len(self.eos_text) :]
        return tail


def token_check(chat: ChatDelta, messages: Sequence[dict], trajectory_ids: Sequence[int], *, final_closed: bool) -> str | None:
    """``None`` when the template's rendering of ``messages`` is the trajectory's text, else where they differ.

    The rendering may go on after the trajectory by the closing text of the
    last assistant turn only (the trajectory stops where the model stopped).
    """
    tok = chat.tokenizer
    have = tok.decode(list(trajectory_ids), skip_special_tokens=False)
    want = chat.render(messages, add_generation_prompt=False)
    if want.startswith(have):
        rest = want[len(have) :]
        if rest == "" or chat.closing_text(ended_with_eos=final_closed).endswith(rest):
            return None
        return f"the template renders {len(rest)} more characters after the trajectory's end: {rest[:80]!r}"
    i = next((k for k, (a, b) in enumerate(zip(have, want)) if a != b), min(len(have), len(want)))
    return (
        f"the trajectory and the chat template's rendering of its messages differ at character {i}: "
        f"trajectory {have[max(0, i - 30) : i + 30]!r} vs template {want[max(0, i - 30) : i + 30]!r}"
    )
