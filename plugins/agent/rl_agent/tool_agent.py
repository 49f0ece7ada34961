"""The built-in ``tool_agent`` loop: generate, run the tool calls, append the results, repeat.

A turn ends at EOS, or at the end of a tool call when
``rollout.multi_turn.stop_at_tool_call_end`` is on (the parser's ``stop``
strings), or after ``max_tokens_per_turn`` sampled tokens. The trajectory stops when a turn has no tool call, after
``max_assistant_turns`` turns, or when the response budget
(``data.max_response_length``, sampled and inserted tokens together) is
spent: tool results whose tokens do not fit are not appended (the stop is
counted in ``agent/stop/budget``). At most ``max_parallel_calls`` calls of a
turn run; the rest are answered with an error message.
"""

from __future__ import annotations

from rl_agent.loop import AgentHandle, AgentSample, Trajectory
from rl_agent.tools import ToolResult


async def tool_agent(handle: AgentHandle, sample: AgentSample) -> Trajectory:
    cfg = handle.config
    traj = Trajectory(prompt_ids=list(sample.prompt_ids), messages=[dict(m) for m in sample.messages])
    while True:
        room = sample.budget - len(traj.response_ids)
        if room <= 0:
            traj.stop_reason = "budget"
            break
        if cfg.max_tokens_per_turn is not None:
            room = min(room, cfg.max_tokens_per_turn)
        out = await handle.generate(traj.prompt_ids + traj.response_ids, room)
        traj.add_sampled(out.token_ids, out.log_probs)
        ended_with_eos = bool(out.token_ids) and out.token_ids[-1] in handle.eos_ids
        text = handle.decode(out.token_ids[:-1] if ended_with_eos else out.token_ids)
        traj.messages.append({"role": "assistant", "content": text})
        _content, calls = handle.parse(text)
        turn = {"sampled": len(out.token_ids), "inserted": 0, "finish_reason": out.finish_reason, "tool_calls": [c.name for c in calls]}
        traj.turns.append(turn)
        if not calls:
            traj.stop_reason = "budget" if out.finish_reason == "length" and len(traj.response_ids) >= sample.budget else "no_tool_call"
            break
        if cfg.max_assistant_turns is not None and len(traj.turns) >= cfg.max_assistant_turns:
            traj.stop_reason = "max_assistant_turns"
            break
        if len(traj.response_ids) >= sample.budget:
            traj.stop_reason = "budget"
            break
        ran, skipped = calls[: cfg.max_parallel_calls], calls[cfg.max_parallel_calls :]
        results = await handle.call_tools(ran, sample)
        results += [ToolResult(text=f"Error: more than {cfg.max_parallel_calls} tool calls in one turn; this one was not run", status="error") for _ in skipped]
        tool_messages = [{"role": "tool", "name": c.name, "content": handle.truncate(r.text)} for c, r in zip(calls, results)]
        turn["tool_results"] = [{"name": c.name, "status": r.status, "text": m["content"], "seconds": r.seconds} for c, r, m in zip(calls, results, tool_messages)]
        inserted = handle.chat.inserted_ids(tool_messages, ended_with_eos=ended_with_eos)
        if len(traj.response_ids) + len(inserted) >= sample.budget:  # no room for the results and one more token
            traj.stop_reason = "budget"
            break
        traj.add_inserted(inserted)
        traj.messages.extend(tool_messages)
        turn["inserted"] = len(inserted)
    return traj
