"""Model output and tools are data, never a crash (issue 47), through the runner the engines call.

A scripted engine writes what a hostile or broken model would (a tool call of ~3,000 ``[``, a 5,000-digit
number, a lone surrogate escape, megabytes of text): each is a failed tool call of that trajectory, counted
in ``agent/tool_errors``, and the rollout returns. Tools that exit (``sys.exit``, ``KeyboardInterrupt``,
``os._exit``, a verl tool class's ``sys.exit``), return invalid text, flood or hang are failed calls too. An
agent loop that breaks the trajectory contract is named (loop, plugin, what was wrong).
"""

from __future__ import annotations

import os
import sys
import threading
from types import SimpleNamespace

import numpy as np
import pytest

from rl_agent.config import MultiTurnConfig
from rl_agent.loop import Trajectory
from rl_agent.runner import AgentLoopError, AgentSetup, run_agent_rollout
from rl_core import hookimpl
from rl_core.cards import AgentLoopCard, Provider, ToolCard
from rl_core.plugins import PluginManager
from rl_core.rollout.multi_turn import Generated
from rl_core_testing.rollout_conformance import prompt_batch
from rl_core_testing.tiny_model import make_tiny_model_dir

PROVIDER = Provider(distribution="rl-agent-trust-tests", version="0.0.1", entry_point="trust")
_RELEASE = threading.Event()


def exits(text: str) -> str:
    """Calls sys.exit.

    Args:
        text: ignored
    """
    sys.exit(3)


def interrupts(text: str) -> str:
    """Raises KeyboardInterrupt.

    Args:
        text: ignored
    """
    raise KeyboardInterrupt


def hard_exits(text: str) -> str:
    """Calls os._exit.

    Args:
        text: ignored
    """
    os._exit(3)


async def async_exits(text: str) -> str:
    """An async tool that calls sys.exit.

    Args:
        text: ignored
    """
    sys.exit(4)


def surrogate(text: str) -> str:
    """Returns a lone surrogate.

    Args:
        text: ignored
    """
    return "ok \ud800 then"


def floods(text: str) -> str:
    """Returns 50 MB of text.

    Args:
        text: ignored
    """
    return "x" * 50_000_000


def hangs(text: str) -> str:
    """Never answers (until the test ends).

    Args:
        text: ignored
    """
    _RELEASE.wait(120)
    return "late"


def bad_message(text: str) -> str:
    """Raises an exception whose message has a lone surrogate.

    Args:
        text: ignored
    """
    raise ValueError("broken \udcff message")


class VerlExits:
    """A verl-style tool class whose execute calls sys.exit."""

    def __init__(self, config, tool_schema):
        pass

    async def execute(self, instance_id, parameters, **kwargs):
        sys.exit(5)


TOOLS = [exits, interrupts, hard_exits, async_exits, surrogate, floods, hangs, bad_message]


async def loop_returns_none(handle, sample):
    return None


async def loop_wrong_lengths(handle, sample):
    traj = Trajectory(prompt_ids=list(sample.prompt_ids))
    traj.response_ids.extend([1, 2, 3])  # grown by hand: no mask, no log-probs
    return traj


async def loop_bad_ids(handle, sample):
    traj = Trajectory(prompt_ids=list(sample.prompt_ids))
    traj.add_inserted([5])
    traj.response_ids[0] = "five"
    return traj


async def loop_raises(handle, sample):
    raise ZeroDivisionError("my loop's bug")


LOOPS = {"returns_none": loop_returns_none, "wrong_lengths": loop_wrong_lengths, "bad_ids": loop_bad_ids, "raises": loop_raises}


class _Cards:
    @staticmethod
    @hookimpl
    def rl_core_register_tools(register):
        for fn in TOOLS:
            register(ToolCard(name=fn.__name__, factory=fn))

    @staticmethod
    @hookimpl
    def rl_core_register_agent_loops(register):
        for name, fn in LOOPS.items():
            register(AgentLoopCard(name=name, factory=fn))


@pytest.fixture(scope="module")
def registry():
    pm = PluginManager()
    pm.load_entrypoints()
    pm.register_module(_Cards, PROVIDER)
    return pm.build_registry()


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return make_tiny_model_dir(tmp_path_factory.mktemp("trust") / "m", "llama", seed=0)


def _rollout(model, registry, texts, *, tools=(), loop="tool_agent", tool_config_path=None, R=32768):
    """One trajectory per text: the scripted engine writes ``texts[i]`` as its first turn, then a plain answer."""
    from rl_core.modeling import load_tokenizer

    tok = load_tokenizer(model)
    mt = MultiTurnConfig(enable=True, tools=list(tools), agent_loop=loop, max_assistant_turns=2, tool_timeout_s=1.0,
                         tool_config_path=tool_config_path, check_tokens=False)
    setup = AgentSetup(mt, tok, registry)
    messages = [[{"role": "user", "content": "hi"}] for _ in texts]
    batch = prompt_batch(model, [tok.apply_chat_template(m, tokenize=False, add_generation_prompt=True) for m in messages])
    raw = np.empty(len(texts), dtype=object)
    raw[:] = messages
    batch.non_tensors["raw_prompt"] = raw
    eos = tok.eos_token_id
    calls = []

    def decode(prompts, budgets, stop):  # the first engine call holds every trajectory's first turn, in order
        calls.append(len(prompts))
        texts_now = texts if len(calls) == 1 else ["done"] * len(prompts)
        return [Generated(tuple(tok.encode(t, add_special_tokens=False)[: max(b - 1, 0)] + [eos]), None, "eos") for t, b in zip(texts_now, budgets)]

    params = SimpleNamespace(n=1, max_new_tokens=R, stop=(), logprobs=False)
    return run_agent_rollout(setup, batch, params, decode, pad_id=tok.pad_token_id or 0, eos_ids=[eos])


def _turns(out):
    return [info["agent"]["turns"] for info in out.non_tensors["extra_info"]]


MALFORMED = {
    "deep [": "<tool_call>" + "[" * 3000 + "</tool_call>",
    "deep {": '<tool_call>{"name": "surrogate", "arguments": ' + '{"a":' * 2000 + "</tool_call>",
    "5,000-digit number": "<tool_call>" + "7" * 5000 + "</tool_call>",
    "lone surrogate escape": '<tool_call>{"name": "\\ud800", "arguments": {"text": "\\udcff"}}</tool_call>',
    "megabytes": "<tool_call>" + "{" * 10 + "a" * 2_000_000 + "</tool_call>",
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_call_in_the_model_s_text_is_a_counted_failed_call(model, registry, case):
    """Before: RecursionError out of the hermes parser (deep nesting), AttributeError on exc.msg (the huge number)."""
    out = _rollout(model, registry, [MALFORMED[case], "plain answer"], tools=["surrogate"])
    turns = _turns(out)
    if case == "megabytes":  # beyond the response budget: parsed (no crash), then the trajectory stops there
        assert out.non_tensors["extra_info"][0]["agent"]["stop_reason"] == "budget"
        return
    assert out.meta.get("agent/tool_errors", 0) >= 1, out.meta
    first = turns[0][0]
    assert first["tool_results"] and first["tool_results"][0]["status"] != "ok"
    first["tool_results"][0]["text"].encode("utf-8")  # what the model sees is valid text
    assert turns[1][0]["tool_calls"] == []  # the other trajectory is untouched


CONTAINED = {
    "sys.exit": ("exits", "SystemExit(3)"),
    "KeyboardInterrupt": ("interrupts", "KeyboardInterrupt"),
    "os._exit": ("hard_exits", "os._exit(3)"),
    "async sys.exit": ("async_exits", "SystemExit(4)"),
    "lone surrogate result": ("surrogate", "not valid Unicode"),
    "flood": ("floods", "50,000,000 characters"),
    "hang": ("hangs", "timed out"),
    "surrogate in an exception": ("bad_message", "broken"),
}


@pytest.mark.parametrize("case", list(CONTAINED))
def test_a_tool_that_exits_hangs_or_floods_is_a_failed_call(model, registry, case):
    name, shown = CONTAINED[case]
    call = '<tool_call>{"name": "%s", "arguments": {"text": "a"}}</tool_call>' % name
    try:
        out = _rollout(model, registry, [call], tools=[name])
    finally:
        if case == "hang":
            _RELEASE.set()
    (result,) = _turns(out)[0][0]["tool_results"]
    assert result["status"] != "ok" and shown in result["text"], result
    result["text"].encode("utf-8")
    assert out.meta.get("agent/tool_errors", 0) + out.meta.get("agent/tool_timeouts", 0) >= 1


def test_a_verl_tool_class_that_exits_is_a_failed_call(model, registry, tmp_path):
    cfg = tmp_path / "tools.yaml"
    cfg.write_text(
        "tools:\n  - class_name: test_agent_trust_rollout.VerlExits\n    config: {}\n"
        "    tool_schema: {type: function, function: {name: verl_exits, description: x, parameters: {type: object, properties: {text: {type: string}}}}}\n"
    )
    call = '<tool_call>{"name": "verl_exits", "arguments": {"text": "a"}}</tool_call>'
    out = _rollout(model, registry, [call], tool_config_path=str(cfg))
    (result,) = _turns(out)[0][0]["tool_results"]
    assert result["status"] == "error" and "SystemExit(5)" in result["text"], result


@pytest.mark.parametrize("loop,what", [
    ("returns_none", "returned NoneType, not a Trajectory"),
    ("wrong_lengths", "3 response ids, 0 mask entries and 0 log-probs"),
    ("bad_ids", "'five', not a token id"),
    ("raises", "raised ZeroDivisionError"),
])
def test_an_agent_loop_that_breaks_the_contract_is_named(model, registry, loop, what):
    """Before: a bare AttributeError / ValueError / the loop's traceback, naming neither the loop nor its plugin."""
    with pytest.raises(AgentLoopError) as info:
        _rollout(model, registry, ["hello"], loop=loop)
    text = str(info.value)
    assert f"agent loop {loop!r}" in text and "rl-agent-trust-tests 0.0.1" in text and what in text, text


def test_os_exit_is_refused_for_an_async_tool_that_outlives_another(model, registry):
    """Two async tools on one event loop: the first one finishing must not lift the guard of the second."""
    import asyncio

    from rl_agent.tools import call_tool, tool_from_function

    async def quick(text: str) -> str:
        """Returns at once.

        Args:
            text: ignored
        """
        return "quick"

    async def late_exit(text: str) -> str:
        """Calls os._exit after a moment.

        Args:
            text: ignored
        """
        await asyncio.sleep(0.2)
        os._exit(7)

    async def both():
        tools = [tool_from_function(quick), tool_from_function(late_exit)]
        return await asyncio.gather(*(call_tool(t, t.name, {"text": "a"}, timeout_s=5) for t in tools))

    first, second = asyncio.run(both())
    assert first.ok and second.status == "error" and "os._exit(7)" in second.text, second


def test_an_agent_runtime_that_breaks_the_contract_is_named():
    """A plugin's runtime (core's rl_core.rollout.multi_turn.AgentRuntime) returning something else than the rollout
    batch: an error naming its class and distribution, not a traceback deep in the trainer."""
    import torch

    from rl_core.batch import Batch
    from rl_core.rollout.multi_turn import MultiTurn

    class BadRuntime:
        def setup(self, tokenizer):
            return None

        def rollout(self, setup, batch, params, decode, *, pad_id, eos_ids):
            return Batch({"responses": torch.zeros(1, 3, dtype=torch.long), "response_mask": torch.zeros(1, 3)}, {})

    mt = MultiTurn(None, tokenizer=None, eos_ids=[0], agent=BadRuntime())
    batch = Batch({"input_ids": torch.ones(2, 4, dtype=torch.long), "attention_mask": torch.ones(2, 4, dtype=torch.long)}, {})
    with pytest.raises(RuntimeError, match=r"agent runtime .*BadRuntime broke the multi-turn contract: its responses is \(1, 3\), not \(4, 8\)"):
        mt.generate(batch, SimpleNamespace(n=2, max_new_tokens=8), lambda *a: [], pad_id=0)
