"""SFT rows -> token ids with a loss mask.

A row is one of (a ``.jsonl`` line, a ``.parquet`` record, or a generated row):

* **prompt / response** (verl's SFT parquet): ``data.prompt_key`` holds a string (one user turn) or chat messages,
  ``trainer.kind_options.response_key`` (default ``response``) a string: the assistant's answer, trained on.
* **chat** (verl's multi-turn SFT): ``trainer.kind_options.messages_key`` (default ``messages``) holds the whole
  conversation, ``{"role", "content"}`` dicts (``tool_calls`` too, where the template renders them; ``tool`` turns).
  Every assistant turn is trained on unless it says ``"loss": false``; a turn of another role only when it says
  ``"loss": true``. The row's ``tools_key`` (default ``tools``) holds tool schemas the template renders.
* **generated** (``data.train_generator`` / ``val_generator``, e.g. the quickstart's reasoning-gym task): the prompt
  and, as the response, the row's answer (``reward_model.ground_truth``).

With ``data.apply_chat_template`` (the default) each trained turn is the text the chat template adds for it after
the generation prompt (its content and end-of-turn tokens); the template must render a conversation's prefixes as
prefixes of its whole text (every common template does), else the row is refused. Without a template the contents
are joined by newlines and each trained turn ends with the EOS token. Segments are tokenized one by one, as a
rollout sees a prompt and its generated tokens.
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable

import attrs
from rl_core.problems import Problem, UserError


class SFTDataError(UserError):
    """An SFT row or file that cannot be trained on: the message names it and the fix."""


@attrs.frozen
class Example:
    ids: tuple[int, ...]
    mask: tuple[int, ...]  # 1: the loss reads this token
    origin: str


# ------------------------------------------------------------------ reading
def read_file(path: str) -> list[Any]:
    """The raw records of a ``.jsonl`` / ``.json`` / ``.parquet`` file."""
    if not os.path.exists(path):
        raise SFTDataError(f"SFT data file {path} does not exist; check data.train_files / data.val_files")
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq

        try:
            return pq.read_table(path).to_pylist()
        except Exception as exc:  # noqa: BLE001 - pyarrow raises its own types for a damaged file
            raise SFTDataError(f"SFT data file {path} is not a readable parquet file ({type(exc).__name__}: {exc}); write it again") from None
    if not path.endswith((".jsonl", ".json")):
        raise SFTDataError(f"SFT data file {path}: unknown format; use .jsonl (one JSON object per line) or .parquet")
    rows = []
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except ValueError as exc:
                    raise SFTDataError(f"{path}, line {i + 1}: not valid JSON ({exc})") from None
    return rows


def split_rows(config: Any, split: str, limit: int | None = None, *, generated_rows: Callable | None = None) -> list[tuple[str, dict]]:
    """``(where, row)`` of a split's files, then its generator's (its answers as the responses): ``generated_rows`` is
    rl-data's ``generated_data`` feature object (the run handle's); without it, the files only."""
    d = config.data
    out: list[tuple[str, dict]] = []
    for path in getattr(d, f"{split}_files"):
        raw = read_file(str(path))
        out += [(f"{path}, row {i}", r) for i, r in enumerate(raw[:limit])]
    gen = getattr(d, f"{split}_generator", None)  # rl-data's section
    if generated_rows is not None and gen is not None and gen.name:
        try:
            rows = generated_rows(d, split)[0]
        except UserError as exc:
            raise SFTDataError(str(exc)) from None
        for i, r in enumerate(rows[:limit]):
            answer = r.get("ground_truth", (r.get("reward_model") or {}).get("ground_truth"))
            out.append((f"data.{split}_generator ({gen.dataset}), row {i}", {"prompt": r["prompt"], "response": None if answer is None else str(answer)}))
    return out


# --------------------------------------------------------------- canonical
def conversation(row: Any, where: str, prompt_key: str, options: Any) -> tuple[list[dict], list[bool], list | None]:
    """``(messages, trained per message, tools)`` of a row; :class:`SFTDataError` when it has nothing to train on."""
    if not isinstance(row, dict):
        raise SFTDataError(f"{where}: an SFT row must be a JSON object, got {type(row).__name__}")
    mk, rk = options.messages_key, options.response_key
    tools = row.get(options.tools_key) or None
    if mk in row and row[mk] is not None:
        messages = row[mk]
        if isinstance(messages, str):  # parquet writers often store nested data as JSON text
            try:
                messages = json.loads(messages)
            except ValueError:
                raise SFTDataError(f"{where}: {mk!r} is a string that is not JSON messages") from None
        if not isinstance(messages, list) or not all(isinstance(m, dict) and "role" in m for m in messages):
            raise SFTDataError(f"{where}: {mk!r} must be a list of {{'role', 'content'}} messages")
        trained = [bool(m.get("loss", m["role"] == "assistant")) for m in messages]
        clean = [{k: v for k, v in m.items() if k != "loss" and v is not None} for m in messages]
        if not any(trained):
            raise SFTDataError(
                f"{where}: the loss mask is empty: no assistant turn is trained on (roles {[m['role'] for m in messages]}, "
                "every assistant turn has \"loss\": false)")
        return clean, trained, tools
    if rk not in row or row[rk] is None:
        raise SFTDataError(
            f"{where}: no response: the row has neither {rk!r} (trainer.kind_options.response_key) nor {mk!r} "
            f"(trainer.kind_options.messages_key); keys: {sorted(row)}. Set the key names, or add the responses "
            "(for GRPO's prompt-only data, write the worked solutions / teacher samples as responses)"
        )
    response = row[rk]
    if not isinstance(response, str):
        raise SFTDataError(f"{where}: {rk!r} must be a string (the assistant's answer), got {type(response).__name__}")
    if not response.strip():
        raise SFTDataError(f"{where}: {rk!r} is empty: the loss mask would be empty; drop the row or fill in the response")
    prompt = row.get(prompt_key)
    if isinstance(prompt, str):
        prompt = [{"role": "user", "content": prompt}]
    if not isinstance(prompt, list) or not all(isinstance(m, dict) and "role" in m for m in prompt):
        raise SFTDataError(f"{where}: {prompt_key!r} (data.prompt_key) must be a string or a list of chat messages; keys: {sorted(row)}")
    messages = [dict(m) for m in prompt] + [{"role": "assistant", "content": response}]
    return messages, [False] * len(prompt) + [True], tools


def row_problems(config: Any, options: Any, rows: list[tuple[str, dict]], key: str) -> list[Problem]:
    """The first row of ``rows`` that cannot be trained on, as a problem of ``key``."""
    for where, row in rows:
        try:
            conversation(row, where, config.data.prompt_key, options)
        except SFTDataError as exc:
            return [Problem(key=key, what=str(exc), fix="fix the row, or point the key at SFT data (docs/sft.md lists the formats)")]
    return []


# ---------------------------------------------------------------- encoding
def segments(tokenizer: Any, messages: list[dict], trained: list[bool], tools: list | None, *, chat: bool, template_kwargs: dict, where: str) -> list[tuple[str, bool]]:
    """The row's text as ``(piece, trained)`` segments, in order."""
    if not chat:
        eos = tokenizer.eos_token or ""
        return [((m.get("content") or "") + (eos if t else "\n"), t) for m, t in zip(messages, trained)]
    if not getattr(tokenizer, "chat_template", None):
        raise SFTDataError("the tokenizer has no chat template; set data.apply_chat_template=false to train on the raw texts")
    extra = {"tools": tools} if tools else {}
    extra.update(template_kwargs or {})

    def render(msgs: list[dict], gen: bool) -> str:
        try:
            return tokenizer.apply_chat_template(msgs, add_generation_prompt=gen, tokenize=False, **extra) if msgs else ""
        except Exception as exc:  # noqa: BLE001 - jinja2's TemplateError, or whatever the template raises
            raise SFTDataError(f"{where}: the chat template rejected the messages (roles {[m['role'] for m in msgs]}): {type(exc).__name__}: {exc}") from None

    full = render(messages, False)
    out: list[tuple[str, bool]] = []
    done = 0  # characters of `full` already placed
    for i, t in enumerate(trained):
        if not t:
            continue
        before = render(messages[:i], messages[i]["role"] == "assistant")
        upto = render(messages[: i + 1], False)
        if not (upto.startswith(before) and full.startswith(upto) and len(before) >= done):
            raise SFTDataError(
                f"{where}: the chat template does not render turn {i} ({messages[i]['role']}) as an extension of the turns before it, "
                "so its tokens cannot be told apart; use a template that does, or data.apply_chat_template=false"
            )
        out += [(full[done : len(before)], False), (upto[len(before) :], True)]
        done = len(upto)
    out.append((full[done:], False))
    return [(s, t) for s, t in out if s]


def encode(tokenizer: Any, messages: list[dict], trained: list[bool], tools: list | None, *, chat: bool, template_kwargs: dict, where: str) -> tuple[list[int], list[int]]:
    """Token ids and the loss mask of one conversation."""
    ids: list[int] = []
    mask: list[int] = []
    for text, t in segments(tokenizer, messages, trained, tools, chat=chat, template_kwargs=template_kwargs, where=where):
        piece = tokenizer(text, add_special_tokens=False)["input_ids"]
        ids += piece
        mask += [int(t)] * len(piece)
    return ids, mask


def build_examples(rows: list[tuple[str, dict]], tokenizer: Any, config: Any, options: Any) -> list[Example]:
    """Every row encoded; a row over the length limit refused or cut (``truncation``); an empty loss mask refused."""
    d = config.data
    limit = options.max_length or d.max_prompt_length + d.max_response_length
    out = []
    for where, row in rows:
        messages, trained, tools = conversation(row, where, d.prompt_key, options)
        ids, mask = encode(tokenizer, messages, trained, tools, chat=d.apply_chat_template, template_kwargs=dict(d.chat_template_kwargs), where=where)
        if len(ids) > limit:
            if options.truncation == "error":
                raise SFTDataError(
                    f"{where}: {len(ids)} tokens, over the limit of {limit} (trainer.kind_options.max_length, else "
                    "data.max_prompt_length + data.max_response_length); raise it, drop the row, or set "
                    "trainer.kind_options.truncation=right to cut the end off"
                )
            ids, mask = ids[:limit], mask[:limit]
        mask = [0, *mask[1:]]  # the first token has nothing before it to be predicted from
        if not any(mask):
            raise SFTDataError(f"{where}: the loss mask is empty after tokenizing{' and truncating' if len(ids) == limit else ''}: no token is trained on; "
                               "fill in the response, or raise trainer.kind_options.max_length")
        out.append(Example(tuple(ids), tuple(mask), where))
    return out
