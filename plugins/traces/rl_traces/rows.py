"""One step's rollouts (rl_core.observers.StepRollouts) as trace columns, and the step's summary.

A trace row is one sample: ``step``, ``phase`` (train / val), ``policy_version``, ``group`` (the prompt's uid: the
samples GRPO compares) and ``sample`` (its index in the group), ``prompt`` (the rendered prompt text) and
``prompt_messages`` (the data row's messages, JSON), ``response`` (every response token, tool results included),
``finish_reason`` (``stop`` / ``length``; multi-turn: the agent's stop reason), ``truncated``, ``response_length``,
``reward``, ``reward_parts`` (JSON: the reward function's dict, the score before the overlong penalty), ``advantage``
(the sample's mean over its trained tokens), ``logprob_gap`` (mean |trainer - rollout| log-prob over its tokens; NaN
without both), ``turns`` (JSON: the messages after the prompt, tool results with their status), ``tool_calls``,
``tool_errors``, ``data_source``, ``ground_truth``, and for the first ``token_limit`` response tokens ``tokens``
(each token's text), ``token_advantage``, ``token_gap`` (trainer - rollout log-prob) and ``token_trained`` (0: a
token the policy did not sample, e.g. a tool result).
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pyarrow as pa

#: the trace file's columns and their types (every step file has exactly these)
SCHEMA = pa.schema([
    ("step", pa.int32()), ("phase", pa.string()), ("policy_version", pa.int32()), ("group", pa.string()), ("sample", pa.int32()),
    ("prompt", pa.string()), ("prompt_messages", pa.string()), ("response", pa.string()), ("finish_reason", pa.string()),
    ("truncated", pa.bool_()), ("response_length", pa.int32()), ("reward", pa.float32()), ("reward_parts", pa.string()),
    ("advantage", pa.float32()), ("logprob_gap", pa.float32()), ("turns", pa.string()), ("tool_calls", pa.int32()),
    ("tool_errors", pa.int32()), ("data_source", pa.string()), ("ground_truth", pa.string()),
    ("tokens", pa.list_(pa.string())), ("token_advantage", pa.list_(pa.float32())), ("token_gap", pa.list_(pa.float32())),
    ("token_trained", pa.list_(pa.int8())),
])


def _column(batch: Any, key: str) -> list | None:
    return list(batch.non_tensors[key]) if key in batch.non_tensors else None


def _json(value: Any) -> str:
    return json.dumps(value, default=str, ensure_ascii=False)


def _float(x: Any) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return float("nan")
    return v


class PieceCache:
    """Token id -> its text, decoded once per run (the colouring's pieces)."""

    def __init__(self) -> None:
        self.pieces: dict[int, str] = {}

    def __call__(self, tokenizer: Any, ids: list[int]) -> list[str]:
        new = sorted({i for i in ids if i not in self.pieces})
        if new:
            for i, text in zip(new, tokenizer.batch_decode([[i] for i in new], skip_special_tokens=False)):
                self.pieces[i] = text
        return [self.pieces[i] for i in ids]


def _turns(info: Any, prompt_messages: Any) -> tuple[list[dict], int, int, str | None]:
    """(messages after the prompt with tool statuses, tool calls, tool errors, the agent's stop reason)."""
    if not isinstance(info, dict) or "agent" not in info:
        return [], 0, 0, None
    agent = info.get("agent") or {}
    messages = list(info.get("messages") or [])
    start = len(prompt_messages) if isinstance(prompt_messages, (list, tuple)) else 0
    statuses = [res.get("status", "ok") for turn in agent.get("turns") or [] for res in turn.get("tool_results") or []]
    calls = sum(len(turn.get("tool_calls") or []) for turn in agent.get("turns") or [])
    out, k = [], 0
    for m in messages[start:]:
        m = {key: m[key] for key in ("role", "name", "content", "tool_calls") if key in m}
        if m.get("role") == "tool":
            m["status"] = statuses[k] if k < len(statuses) else "ok"
            k += 1
        out.append(m)
    errors = sum(1 for s in statuses if s != "ok")
    return out, calls, errors, agent.get("stop_reason")


def step_columns(r: Any, token_limit: int, pieces: PieceCache) -> dict[str, list]:
    """The trace columns of a :class:`rl_core.observers.StepRollouts`."""
    b = r.batch
    tok = r.tokenizer
    n = len(b)
    responses = b["responses"]
    R = responses.shape[1]
    trained = b["response_mask"].bool()
    valid = b["attention_mask"][:, -R:].bool() if "attention_mask" in b.tensors.keys() else trained
    lengths = valid.sum(-1).tolist()
    P = b["prompts"].shape[1] if "prompts" in b.tensors.keys() else 0
    prompt_valid = b["attention_mask"][:, :P].bool() if P and "attention_mask" in b.tensors.keys() else None
    prompt_text = _column(b, "prompt_text")
    response_text = _column(b, "response_text")
    raw_prompts = _column(b, "raw_prompt") or [None] * n
    infos = _column(b, "extra_info") or [None] * n
    uids = _column(b, "uid") or [str(i) for i in range(n)]
    sources = _column(b, "data_source") or [None] * n
    truths = _column(b, "ground_truth") or [None] * n
    scores = [float(x) for x in r.scores.float().tolist()] if r.scores is not None else [float("nan")] * n
    raw = r.raw_scores.float().tolist() if r.raw_scores is not None else None
    extras = r.reward_extras
    adv = b["advantages"].float() if "advantages" in b.tensors.keys() else None
    gap = None
    if r.trainer_log_probs is not None and "rollout_log_probs" in b.tensors.keys():
        gap = (r.trainer_log_probs.float() - b["rollout_log_probs"].float())
    if "policy_version" in b.tensors.keys():
        versions = [int(v) for v in b["policy_version"].view(-1).tolist()]
    elif "policy_version" in b.meta:
        versions = [int(b.meta["policy_version"])] * n
    else:
        versions = [int(r.policy_version)] * n
    eos = tok.eos_token_id if tok is not None else None
    eos = set(eos if isinstance(eos, (list, tuple)) else [eos]) - {None}
    seen: dict[str, int] = {}
    cols: dict[str, list] = {name: [] for name in SCHEMA.names}
    resp_ids = responses.tolist()
    for i in range(n):
        L = int(lengths[i])
        ids = [t for t, ok in zip(resp_ids[i], valid[i].tolist()) if ok]
        if prompt_text is not None and prompt_text[i] is not None:
            prompt = str(prompt_text[i])
        elif prompt_valid is not None and tok is not None:
            prompt = tok.decode(b["prompts"][i][prompt_valid[i]].tolist(), skip_special_tokens=False)
        else:
            prompt = ""
        turns, calls, errors, stop = _turns(infos[i], raw_prompts[i])
        if turns or response_text is None or tok is None:
            response = tok.decode(ids, skip_special_tokens=True) if tok is not None else ""
        else:
            response = str(response_text[i])
        if stop is not None:
            finish, truncated = stop, stop == "budget"
        else:
            truncated = L >= r.max_response_length > 0 and not (ids and ids[-1] in eos)
            finish = "length" if truncated else "stop"
        parts = dict(extras[i]) if extras is not None and i < len(extras) and isinstance(extras[i], dict) else {}
        if raw is not None and not math.isclose(raw[i], scores[i]):
            parts["before_overlong_penalty"] = raw[i]
        m = trained[i]
        adv_row = adv[i] if adv is not None else None
        gap_row = gap[i] if gap is not None else None
        cnt = int(m.sum())
        a = float((adv_row * m).sum() / cnt) if adv_row is not None and cnt else float("nan")
        g = float(((gap_row.abs().nan_to_num(0.0)) * m).sum() / cnt) if gap_row is not None and cnt else float("nan")
        if gap_row is not None and cnt and bool(gap_row[m].isnan().all()):
            g = float("nan")
        k = min(L, token_limit)
        pos = valid[i].nonzero().view(-1)[:k].tolist()
        group = str(uids[i])
        seen[group] = seen.get(group, -1) + 1
        row = dict(
            step=int(r.step), phase=r.phase, policy_version=versions[i], group=group, sample=seen[group], prompt=prompt,
            prompt_messages=_json(raw_prompts[i]) if raw_prompts[i] is not None else "", response=response,
            finish_reason=finish, truncated=bool(truncated), response_length=L, reward=scores[i], reward_parts=_json(parts),
            advantage=a, logprob_gap=g, turns=_json(turns) if turns else "", tool_calls=calls, tool_errors=errors,
            data_source="" if sources[i] is None else str(sources[i]), ground_truth="" if truths[i] is None else _json(truths[i]) if not isinstance(truths[i], str) else truths[i],
            tokens=pieces(tok, ids[:k]) if tok is not None else [],
            token_advantage=[float(adv_row[p]) for p in pos] if adv_row is not None else [],
            token_gap=[_float(gap_row[p]) for p in pos] if gap_row is not None else [],
            token_trained=[int(m[p]) for p in pos],
        )
        for name in SCHEMA.names:
            cols[name].append(row[name])
    return cols


def summary(cols: dict[str, list]) -> dict[str, Any]:
    """The step's numbers over every sample (kept or not): what the steps table shows."""
    n = len(cols["step"])
    if not n:
        return {"samples": 0, "groups": 0}
    reward = np.asarray(cols["reward"], dtype=np.float64)
    gap = np.asarray(cols["logprob_gap"], dtype=np.float64)
    groups: dict[str, list[float]] = {}
    for g, rw in zip(cols["group"], cols["reward"]):
        groups.setdefault(g, []).append(rw)
    return {
        "samples": n,
        "groups": len(groups),
        "reward_mean": float(np.nanmean(reward)) if np.isfinite(reward).any() else None,
        "length_mean": float(np.mean(cols["response_length"])),
        "truncated": int(sum(cols["truncated"])),
        "tool_calls": int(sum(cols["tool_calls"])),
        "tool_errors": int(sum(cols["tool_errors"])),
        "equal_reward_groups": sum(1 for v in groups.values() if len(v) > 1 and max(v) == min(v)),
        "logprob_gap_mean": float(np.nanmean(gap)) if np.isfinite(gap).any() else None,
    }
