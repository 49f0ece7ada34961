"""Many agent loops over one engine: their turns batched, their trajectories laid out as the rollout batch.

A rollout engine with ``rollout.multi_turn.enable`` hands
:func:`run_agent_rollout` a batched decode function
``decode(prompts, budgets, stop) -> list[Generated]``. Each of the ``B * n``
trajectories runs its agent loop (the row's ``agent_name``, else
``rollout.multi_turn.agent_loop``) as an asyncio task; when every
unfinished loop waits on ``handle.generate``, all the requests are decoded
together in one engine call (all active trajectories advance one turn
together; finished ones drop out), while tool calls of different
trajectories overlap.

Output (:func:`rl_core.rollout.output.rollout_batch`): ``responses`` are the
sampled ids and the inserted template / tool ids, right-padded to
``max_new_tokens``; ``response_mask`` is 1 on sampled tokens only;
``attention_mask`` is 1 on every real token; ``rollout_log_probs`` are 0 on
inserted tokens. Each row's ``extra_info`` gains ``messages`` (the whole
conversation, tool results included) and ``agent`` (turns, tool calls, stop
reason): what reward functions read. ``meta`` carries the ``agent/*``
counters (summed over replicas by the trainer).
"""

from __future__ import annotations

import asyncio
import contextvars
import copy
import queue
import threading
from collections import defaultdict
from typing import Any, Callable, Sequence

import numpy as np
import torch

import attrs

from rl_agent.chat import ChatDelta, token_check
from rl_agent.loop import AgentHandle, AgentSample, Generated, Trajectory
from rl_agent.tools import Tool, ToolResult, hung_calls
from rl_core.batch import Batch
from rl_core.problems import UserError
from rl_core.rollout.multi_turn import Decode
from rl_core.rollout.output import rollout_batch


class AgentStats:
    """Additive counters (``agent/*``): sums, so replicas add up."""

    def __init__(self) -> None:
        self.values: dict[str, float] = defaultdict(float)

    def add(self, key: str, value: float = 1.0) -> None:
        self.values[key] += value

    def tool_result(self, name: str, result: ToolResult) -> None:
        self.add("agent/tool_calls")
        self.add("agent/tool_time_s", result.seconds)
        if result.status == "timeout":
            self.add("agent/tool_timeouts")
            self.add(f"agent/tool_timeouts/{name}")
        elif result.status != "ok":
            self.add("agent/tool_errors")
            self.add(f"agent/tool_errors/{name}")


class AgentSetup:
    """Tools, parser and loops of ``rollout.multi_turn``, built once per engine (:meth:`AgentRuntime.setup`).

    ``registry``: the agent cards (:func:`rl_core.rollout.multi_turn.agent_runtime` hands the runtime those the
    resolver saw; a test may pass ``rl_core.plugins.get_registry()``)."""

    def __init__(self, mt, tokenizer, registry) -> None:
        from rl_agent.resolve import build_tools, tool_parser

        self.config = mt
        self.tokenizer = tokenizer
        self.tools: dict[str, Tool] = build_tools(mt, registry)
        self.parser = tool_parser(mt.format, registry)
        self.chat = ChatDelta(tokenizer, [t.schema for t in self.tools.values()])
        self._loops: dict[str, Any] = {}
        self._registry = registry
        self.loop(mt.agent_loop)  # an unknown default loop fails here, before any generation

    def loop(self, name: str):
        if name not in self._loops:
            from rl_agent.resolve import agent_loop

            self._loops[name] = agent_loop(name, self._registry)
        return self._loops[name]

    def describe(self, name: str) -> str:
        """``agent loop 'name' (factory, from distribution version)``: who to blame for a broken trajectory."""
        card = self._registry.cards.get("agent_loop", {}).get(name)
        if card is None:
            return f"agent loop {name!r}"
        return f"agent loop {name!r} ({card.factory if isinstance(card.factory, str) else getattr(card.factory, '__qualname__', card.factory)}, from {card.provider or 'an unregistered card'})"


_TRAJECTORY: contextvars.ContextVar[int] = contextvars.ContextVar("rl_core_agent_trajectory", default=0)


class _Batcher:
    """Collects the generate requests of all live loops and decodes them in one engine call."""

    def __init__(self, decode: Decode, stop: tuple[str, ...]) -> None:
        self.decode = decode
        self.stop = stop
        self.pending: list[tuple[list[int], int, asyncio.Future, int]] = []
        self.active = 0
        self.wake = asyncio.Event()
        self.engine_errors: list[BaseException] = []  # the engine's failures handed to the loops (not the loops' fault)

    async def generate(self, ids: list[int], budget: int) -> Generated:
        fut = asyncio.get_running_loop().create_future()
        self.pending.append((ids, budget, fut, _TRAJECTORY.get()))
        self.wake.set()
        return await fut

    async def drive(self, coros: Sequence) -> list[Any]:
        async def tracked(index, coro):
            _TRAJECTORY.set(index)  # this task's own context: its requests sort by trajectory
            try:
                return await coro
            finally:
                self.active -= 1
                self.wake.set()

        self.active = len(coros)
        tasks = [asyncio.ensure_future(tracked(i, c)) for i, c in enumerate(coros)]
        while self.active > 0:
            await self.wake.wait()
            self.wake.clear()
            if self.pending and len(self.pending) >= self.active:
                # in trajectory order, whatever order their tool calls finished in: the engine call (and each
                # request's seed) is the same on every run and on every rank of a tensor-parallel group
                batch, self.pending = sorted(self.pending, key=lambda p: p[3]), []
                try:
                    outs = self.decode([b[0] for b in batch], [b[1] for b in batch], self.stop)
                except BaseException as exc:  # the engine failed: every waiting loop gets the error
                    self.engine_errors.append(exc)
                    for _, _, fut, _ in batch:
                        fut.set_exception(exc)
                    continue
                for (_, _, fut, _), out in zip(batch, outs):
                    fut.set_result(out)
        return await asyncio.gather(*tasks)


def _run_loops(batcher: _Batcher, coros: list) -> list:
    """Run the loops' event loop in a helper thread while every engine call (``decode``) runs on this, the
    caller's, thread: an engine may run its own event loop (SGLang's offline engine calls
    ``run_until_complete``, which cannot run inside ours) or hold thread-bound state, and the caller may be
    inside an event loop itself (an async actor)."""
    calls: queue.Queue = queue.Queue()
    decode = batcher.decode

    def on_caller_thread(*args):
        reply: queue.Queue = queue.Queue(1)
        calls.put((args, reply))
        ok, value = reply.get()
        if not ok:
            raise value
        return value

    batcher.decode = on_caller_thread
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["result"] = asyncio.run(batcher.drive(coros))
        except BaseException as exc:  # noqa: BLE001 - re-raised on the caller's thread
            box["error"] = exc
        finally:
            calls.put(None)

    thread = threading.Thread(target=run, name="rl-core-agent-loops", daemon=True)
    thread.start()
    while (item := calls.get()) is not None:
        args, reply = item
        try:
            reply.put((True, decode(*args)))
        except BaseException as exc:  # noqa: BLE001 - every waiting loop gets the engine's error
            reply.put((False, exc))
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["result"]


def _column(batch: Batch, key: str, rows: int, default=None) -> list:
    if key in batch.non_tensors:
        return list(batch.non_tensors[key])
    return [default] * rows


def run_agent_rollout(setup: AgentSetup, batch: Batch, params, decode: Decode, *, pad_id: int, eos_ids: Sequence[int]) -> Batch:
    """The rollout batch of ``params.n`` trajectories per prompt of ``batch`` (see the module docstring)."""
    from rl_core.rollout.samples import unpadded_prompts

    mt = setup.config
    n, R = params.n, params.max_new_tokens
    prompts = unpadded_prompts(batch.tensors["input_ids"], batch.tensors["attention_mask"])
    B = len(prompts)
    raw = _column(batch, "raw_prompt", B)
    names = _column(batch, "agent_name", B)
    infos = _column(batch, "extra_info", B)
    stats = AgentStats()
    stop = tuple(params.stop) + (tuple(setup.parser.stop) if mt.stop_at_tool_call_end else ())
    batcher = _Batcher(decode, stop)
    handle = AgentHandle(
        tokenizer=setup.tokenizer, parser=setup.parser, tools=setup.tools, config=mt, chat=setup.chat,
        eos_ids=eos_ids, generate=batcher.generate, stats=stats,
    )
    samples, loops, loop_names = [], [], []
    for i in range(B):
        info = infos[i] if isinstance(infos[i], dict) else {}
        messages = list(raw[i]) if raw[i] is not None else []
        for _ in range(n):
            samples.append(AgentSample(index=i, prompt_ids=prompts[i], messages=messages, budget=R, extra_info=info,
                                       tools_kwargs=dict(info.get("tools_kwargs") or {})))
            loops.append(setup.loop(names[i] or mt.agent_loop))
            loop_names.append(names[i] or mt.agent_loop)
    trajectories: list[Trajectory] = _run_loops(batcher, [_named(setup, batcher, n, r, loop, handle, s) for r, (n, loop, s) in enumerate(zip(loop_names, loops, samples))])

    rows = B * n
    responses = torch.full((rows, R), int(pad_id), dtype=batch.tensors["input_ids"].dtype)
    response_mask = torch.zeros((rows, R), dtype=batch.tensors["attention_mask"].dtype)
    attention = torch.zeros_like(response_mask)
    log_probs = torch.zeros((rows, R), dtype=torch.float32)
    new_infos = []
    for r, (traj, sample) in enumerate(zip(trajectories, samples)):
        check_trajectory(traj, R, r, setup.describe(loop_names[r]))
        k = len(traj.response_ids)
        responses[r, :k] = torch.tensor(traj.response_ids, dtype=responses.dtype)
        response_mask[r, :k] = torch.tensor(traj.response_mask, dtype=response_mask.dtype)
        attention[r, :k] = 1
        log_probs[r, :k] = torch.tensor(traj.log_probs, dtype=torch.float32)
        if mt.check_tokens and sample.messages:
            last_closed = bool(traj.response_ids) and traj.response_mask[-1] == 1 and traj.response_ids[-1] in handle.eos_ids
            traj.token_check = token_check(setup.chat, traj.messages, traj.prompt_ids + traj.response_ids, final_closed=last_closed)
            if traj.token_check:
                stats.add("agent/token_check_mismatches")
        _count(stats, traj)
        info = copy.copy(sample.extra_info)
        info["messages"] = traj.messages
        info["agent"] = {"turns": traj.turns, "stop_reason": traj.stop_reason, "token_check": traj.token_check}
        new_infos.append(info)
    hung = hung_calls()
    if hung:  # sync tool calls still running past their timeout (threads that cannot be killed), all tools
        stats.add("agent/tool_hung_calls", hung)
    meta = dict(stats.values)
    out = rollout_batch(batch, n, responses, response_mask, log_probs if params.logprobs else None, meta=meta, response_attention_mask=attention)
    arr = np.empty(rows, dtype=object)
    arr[:] = new_infos
    out.non_tensors["extra_info"] = arr
    return out


class AgentLoopError(UserError, RuntimeError):
    """An agent loop (a plugin's) broke the trajectory contract (:mod:`rl_agent.loop`) or raised: names the loop, its
    plugin and what was wrong."""


async def _named(setup: AgentSetup, batcher: _Batcher, name: str, row: int, loop, handle: AgentHandle, sample: AgentSample):
    """``loop(handle, sample)``; what it raises becomes an :class:`AgentLoopError` naming the loop and its plugin
    (an engine failure it passed on stays the engine's)."""
    try:
        return await loop(handle, sample)
    except (AgentLoopError, asyncio.CancelledError):
        raise
    except BaseException as exc:
        if any(exc is e for e in batcher.engine_errors):
            raise
        raise _loop_error(setup, name, row, exc) from exc


def _loop_error(setup: AgentSetup, name: str, row: int, exc: BaseException) -> "AgentLoopError":
    return AgentLoopError(f"{setup.describe(name)} raised {type(exc).__name__} on trajectory {row}: {exc}; "
                          "an agent loop's failures are its plugin's to fix (report it to its authors)")


def check_trajectory(traj: Any, R: int, row: int, loop: str = "the agent loop") -> None:
    """What every agent loop must return (:class:`~rl_agent.loop.Trajectory`); an :class:`AgentLoopError` naming
    ``loop`` (its name and plugin) and what was wrong otherwise."""

    def broken(what: str) -> AgentLoopError:
        return AgentLoopError(f"{loop} broke the trajectory contract on trajectory {row}: {what}; an agent loop returns an "
                              "rl_agent.loop.Trajectory grown with add_sampled / add_inserted (report it to the loop's authors)")

    if not isinstance(traj, Trajectory):
        raise broken(f"it returned {type(traj).__name__}, not a Trajectory")
    for name in ("prompt_ids", "response_ids", "response_mask", "log_probs", "messages", "turns"):
        value = getattr(traj, name, None)
        if not isinstance(value, (list, tuple)):
            raise broken(f"Trajectory.{name} is {type(value).__name__}, not a list")
    k = len(traj.response_ids)
    if not (k == len(traj.response_mask) == len(traj.log_probs)):
        raise broken(f"{k} response ids, {len(traj.response_mask)} mask entries and {len(traj.log_probs)} log-probs")
    if k > R:
        raise broken(f"{k} response tokens, more than the budget data.max_response_length={R}")
    bad = next((i for i in traj.response_ids if not isinstance(i, (int, np.integer)) or isinstance(i, bool) or i < 0), None)
    if bad is not None:
        raise broken(f"response_ids holds {bad!r}, not a token id (an int >= 0)")
    if any(m not in (0, 1) for m in traj.response_mask):
        raise broken("response_mask holds values other than 0 and 1")
    if not all(isinstance(x, (int, float, np.floating, np.integer)) for x in traj.log_probs):
        raise broken("log_probs holds values that are not numbers")
    if not all(isinstance(m, dict) for m in traj.messages):
        raise broken("messages holds entries that are not mappings")
    if not isinstance(traj.stop_reason, str):
        raise broken(f"stop_reason is {type(traj.stop_reason).__name__}, not a string")



def _count(stats: AgentStats, traj: Trajectory) -> None:
    stats.add("agent/trajectories")
    stats.add("agent/turns", len(traj.turns))
    stats.add(f"agent/stop/{traj.stop_reason or 'unknown'}")
    stats.add("agent/sampled_tokens", sum(traj.response_mask))
    stats.add("agent/inserted_tokens", len(traj.response_mask) - sum(traj.response_mask))


@attrs.frozen
class AgentRuntime:
    """What rollout backends call for ``rollout.multi_turn`` (:class:`rl_core.rollout.multi_turn.AgentRuntime`): the
    runner of the ``tool_agent`` card, built once when the stack is resolved, with the agent cards it saw."""

    config: Any  # rollout.multi_turn
    registry: Any  # the tool, tool_parser and agent_loop cards

    def tools(self) -> dict[str, Tool]:
        from rl_agent.resolve import build_tools

        return build_tools(self.config, self.registry)

    def tool_schemas(self) -> list[dict] | None:
        return [t.schema for t in self.tools().values()] or None

    def setup(self, tokenizer) -> AgentSetup:
        return AgentSetup(self.config, tokenizer, self.registry)

    def rollout(self, setup: AgentSetup, batch: Batch, params, decode: Decode, *, pad_id: int, eos_ids: Sequence[int]) -> Batch:
        return run_agent_rollout(setup, batch, params, decode, pad_id=pad_id, eos_ids=eos_ids)


_check_trajectory = check_trajectory  # its name before issue 47
