"""The ``openai_agent`` loop's runner: a rollout call as agent programs talking to the engine through the endpoint.

:meth:`OpenAIAgentRuntime.rollout` (what every rollout backend calls for ``rollout.multi_turn``, on the engine's
thread) starts the endpoint (:mod:`rl_agent_openai.server`) and one agent program per trajectory
(:mod:`rl_agent_openai.programs`), then serves the programs' calls on this thread: the calls waiting together
(every running program's, or those that came within ``batch_wait_s`` of the first) are decoded in one engine call
(one per distinct stop-string set), through the backend's batched ``decode``; the rollout backend is never
addressed directly, so hf, vLLM and SGLang serve it alike. When every program has ended (or been killed at its
limits) the server closes and each trajectory becomes one row:

- the prompt is what the engine saw in the session's first call (rows may differ in length; left-padded);
- the response is every later token, in order: the ids the engine sampled (``response_mask`` 1, their
  log-probs) and what the agent put between calls (``response_mask`` 0, log-prob 0): so the row's tokens are
  exactly the last call's input plus its output (:mod:`rl_agent_openai.session`);
- ``extra_info["agent"]``: the calls (``turns``), the program's ``status`` / ``stop_reason``, its ``reward`` (the
  returned one, ``failure_reward`` for a failed program, else None: the run's reward function scores the final
  state), its ``result`` and the tail of its output; ``extra_info["messages"]``: the conversation.
"""

from __future__ import annotations

import copy
import secrets
from typing import Any, Sequence

import attrs
import numpy as np
import torch
from rl_agent.resolve import tool_parser
from rl_core.batch import Batch
from rl_core.rollout.multi_turn import Decode
from rl_core.rollout.output import rollout_batch
from rl_core.rollout.samples import unpadded_prompts

from rl_agent_openai.options import ProgramOptions, program_options
from rl_agent_openai.programs import Programs, Run, reward_of, visible_task
from rl_agent_openai.server import Endpoint, Request, RequestQueue, RunSampling, serve, stop
from rl_agent_openai.session import Session


async def openai_agent(handle, sample):  # the card's factory: this loop runs only under its own runner
    raise RuntimeError("the openai_agent loop runs agent programs through rl_agent_openai's runner, not rl-agent's: set "
                       "rollout.multi_turn.agent_loop=openai_agent (rows' agent_name cannot pick it inside another loop's rollout)")


class OpenAISetup:
    """What one engine keeps for the run: the tokenizer, the run's tool-call parser and the program options."""

    def __init__(self, mt, tokenizer, registry) -> None:
        self.config = mt
        self.tokenizer = tokenizer
        self.parser = tool_parser(mt.format, registry)
        self.options: ProgramOptions = program_options(mt)


def _column(batch: Batch, key: str, rows: int) -> list:
    return list(batch.non_tensors[key]) if key in batch.non_tensors else [None] * rows


def _serve(runs: list[Run], sessions: dict[str, Session], setup: OpenAISetup, params, decode: Decode, eos_ids) -> Endpoint:
    opts = setup.options
    rq = RequestQueue()
    by_sid = {r.sid: r for r in runs}
    holder: dict[str, Programs] = {}
    endpoint = Endpoint(tokenizer=setup.tokenizer, parser=setup.parser, run=RunSampling.of(params, setup.config, setup.parser),
                        sessions=sessions, eos_ids=eos_ids, max_request_bytes=opts.max_request_bytes, submit=rq.put,
                        on_flood=lambda s: holder["p"].stop(by_sid[s.sid], "too_many_calls"), timeout_s=opts.timeout_s + 30)
    token = secrets.token_urlsafe(32)
    server, url = serve(endpoint, token)
    programs = holder["p"] = Programs(opts, runs, url, token)
    failure: BaseException | None = None
    try:
        programs.poll()
        while not programs.done():
            reqs = rq.take(programs.live, opts.batch_wait_s)
            if reqs:
                failure = _decode(reqs, decode)
                if failure is not None:
                    break
            programs.poll()
    finally:
        programs.close()
        stop(server)
        for req in rq.drain():
            req.error = RuntimeError("the rollout ended")
            req.done.set()
    if failure is not None:
        raise failure
    return endpoint


def _decode(reqs: list[Request], decode: Decode) -> BaseException | None:
    """Decode the waiting calls: one engine call per distinct stop-string set, in arrival order within each."""
    groups: dict[tuple[str, ...], list[Request]] = {}
    for r in reqs:
        groups.setdefault(r.stop, []).append(r)
    for stop_strings, group in groups.items():
        try:
            outs = decode([r.ids for r in group], [r.budget for r in group], stop_strings)
            if len(outs) != len(group):
                raise RuntimeError(f"the engine answered {len(outs)} of {len(group)} calls")
        except BaseException as exc:  # noqa: BLE001 - the engine failed: the calls get a 503, the rollout raises it
            for r in reqs:
                if not r.done.is_set():
                    r.error = exc
                    r.done.set()
            return exc
        for r, out in zip(group, outs):
            r.result = out
            r.done.set()
    return None


def run_openai_rollout(setup: OpenAISetup, batch: Batch, params, decode: Decode, *, pad_id: int, eos_ids: Sequence[int]) -> Batch:
    """``params.n`` trajectories per prompt of ``batch``, each one run of the agent program (module docstring)."""
    opts = setup.options
    n, R = params.n, params.max_new_tokens
    prompts = unpadded_prompts(batch.tensors["input_ids"], batch.tensors["attention_mask"])
    B = len(prompts)
    raw = _column(batch, "raw_prompt", B)
    infos = _column(batch, "extra_info", B)
    runs: list[Run] = []
    sessions: dict[str, Session] = {}
    for i in range(B):
        info = infos[i] if isinstance(infos[i], dict) else {}
        messages = [dict(m) for m in raw[i]] if raw[i] is not None else []
        for _ in range(n):
            sid = secrets.token_hex(12)
            sessions[sid] = Session(sid, i, prompts[i], R, opts.max_calls)
            runs.append(Run(index=len(runs), sid=sid, task=visible_task(i, messages, info)))
    endpoint = _serve(runs, sessions, setup, params, decode, eos_ids)

    rows = B * n
    trajectories = [sessions[r.sid].close() for r in runs]
    P = max(len(t[0]) for t in trajectories)
    dtype = batch.tensors["input_ids"].dtype
    mdtype = batch.tensors["attention_mask"].dtype
    input_ids = torch.full((rows, P), int(pad_id), dtype=dtype)
    attn = torch.zeros((rows, P), dtype=mdtype)
    responses = torch.full((rows, R), int(pad_id), dtype=dtype)
    response_mask = torch.zeros((rows, R), dtype=mdtype)
    response_attention = torch.zeros_like(response_mask)
    log_probs = torch.zeros((rows, R), dtype=torch.float32)
    stats: dict[str, float] = {}

    def add(key: str, v: float = 1.0) -> None:
        stats[key] = stats.get(key, 0.0) + v

    if endpoint.tools_ignored:  # the model never saw the tool schemas the program sent (e.g. SmolLM2's template)
        add("agent/tools_ignored_by_template")
    new_infos = []
    for r, (run, (prompt, resp, mask, lps)) in enumerate(zip(runs, trajectories)):
        if len(resp) > R:  # cannot happen: every call's budget is the room left
            raise RuntimeError(f"trajectory {r} has {len(resp)} response tokens, more than data.max_response_length={R}")
        input_ids[r, P - len(prompt) :] = torch.tensor(prompt, dtype=dtype)
        attn[r, P - len(prompt) :] = 1
        k = len(resp)
        if k:
            responses[r, :k] = torch.tensor(resp, dtype=dtype)
            response_mask[r, :k] = torch.tensor(mask, dtype=mdtype)
            response_attention[r, :k] = 1
            log_probs[r, :k] = torch.tensor(lps, dtype=torch.float32)
        session = sessions[run.sid]
        reward, result = reward_of(run, opts.failure_reward)
        add("agent/trajectories")
        add("agent/turns", len(session.calls))
        add(f"agent/stop/{run.status}")
        add("agent/refused_calls", len(session.refused))
        add("agent/sampled_tokens", sum(mask))
        add("agent/inserted_tokens", len(mask) - sum(mask))
        add("agent/program_seconds", run.seconds)
        info = copy.copy(infos[run.task["index"]]) if isinstance(infos[run.task["index"]], dict) else {}
        info["messages"] = session.messages or run.task["messages"]
        info["agent"] = {
            "turns": [{"sampled": len(c.output_ids), "inserted": c.inserted, "finish_reason": c.finish_reason, "kind": c.kind} for c in session.calls],
            "stop_reason": run.status, "status": run.status, "returncode": run.returncode, "reward": reward, "result": result,
            "refused": list(session.refused), "output_tail": run.log_tail[-500:], "seconds": run.seconds,
        }
        new_infos.append(info)
    rep = batch.repeat(n)
    prompt_batch = Batch({**dict(rep.tensors.items()), "input_ids": input_ids, "attention_mask": attn}, rep.non_tensors, rep.meta, batch_size=rows)
    out = rollout_batch(prompt_batch, 1, responses, response_mask, log_probs if params.logprobs else None, meta=stats,
                        response_attention_mask=response_attention)
    arr = np.empty(rows, dtype=object)
    arr[:] = new_infos
    out.non_tensors["extra_info"] = arr
    return out


@attrs.frozen
class OpenAIAgentRuntime:
    """The ``openai_agent`` card's runner (:class:`rl_core.rollout.multi_turn.AgentRuntime`)."""

    config: Any  # rollout.multi_turn
    registry: Any  # the tool, tool_parser and agent_loop cards

    def tool_schemas(self) -> list[dict] | None:
        return None  # the program's requests carry its tools; the dataset prompt is rendered without any

    def setup(self, tokenizer) -> OpenAISetup:
        return OpenAISetup(self.config, tokenizer, self.registry)

    def rollout(self, setup: OpenAISetup, batch: Batch, params, decode: Decode, *, pad_id: int, eos_ids: Sequence[int]) -> Batch:
        return run_openai_rollout(setup, batch, params, decode, pad_id=pad_id, eos_ids=eos_ids)
