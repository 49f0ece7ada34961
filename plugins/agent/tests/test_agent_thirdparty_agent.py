"""A third-party tool and agent loop, really pip-installed as a distribution, found by entry point and used by name."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import REPO, pip_install_target, run_rlcore

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "agent_plugin"

SCRIPT = textwrap.dedent(
    """
    import json, numpy as np, torch
    from rl_agent.config import MultiTurnConfig
    from rl_agent.loop import Generated
    from rl_agent.runner import AgentSetup, run_agent_rollout
    from rl_core.backends import SamplingParams
    from rl_core.batch import Batch
    from rl_core.plugins import get_registry
    from rl_core_testing.tiny_model import EOS_ID, PAD_ID, build_tokenizer

    tok = build_tokenizer()
    mt = MultiTurnConfig(enable=True, tools=["reverse_text"], agent_loop="one_call_agent")
    setup = AgentSetup(mt, tok, get_registry())
    script = ['<tool_call>{"name": "reverse_text", "arguments": {"text": "abc"}}</tool_call>', "It is cba."]

    def decode(prompts, budgets, stop):  # a scripted engine: a trajectory's n-th turn says script[n]
        outs = []
        for p in prompts:
            turn = (p.count(1) - 2) // 2  # <|im_start|> (id 1): 2 in the prompt, 2 more per tool round
            text = script[min(turn, 1)]
            ids = tok.encode(text, add_special_tokens=False) + [EOS_ID]
            outs.append(Generated(tuple(ids), tuple([-0.5] * len(ids)), "eos"))
        return outs

    msgs = [[{"role": "user", "content": "reverse abc"}], [{"role": "user", "content": "reverse abc"}]]
    enc = tok([tok.apply_chat_template(m, tokenize=False, add_generation_prompt=True) for m in msgs], padding=True, return_tensors="pt")
    raw = np.empty(2, dtype=object); raw[:] = msgs
    batch = Batch({"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]},
                  {"raw_prompt": raw, "agent_name": [None, "tool_agent"], "extra_info": [{}, {}]})
    out = run_agent_rollout(setup, batch, SamplingParams(n=1, max_new_tokens=128, logprobs=True), decode, pad_id=PAD_ID, eos_ids=[EOS_ID])
    infos = out.non_tensors["extra_info"]
    print(json.dumps({"stop": [i["agent"]["stop_reason"] for i in infos], "messages": [i["messages"] for i in infos],
                      "card": str(setup.tools["reverse_text"].schema)}))
    """
)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    target = tmp_path_factory.mktemp("agent_site")
    pip_install_target(FIXTURE, target)
    assert list(target.glob("rl_agent_example-0.2.0.dist-info"))
    return target


def test_listed_with_its_distribution(site):
    res = run_rlcore("plugins", "--json", pythonpath=[site])
    assert res.returncode in (0, 1), res.stderr
    cards = {(c["kind"], c["name"]): c for c in json.loads(res.stdout)["cards"]}
    for key in (("tool", "reverse_text"), ("agent_loop", "one_call_agent")):
        assert cards[key]["distribution"] == "rl-agent-example" and cards[key]["version"] == "0.2.0"


def test_used_by_name_from_the_config_and_a_rows_agent_name(site):
    env = {"PYTHONPATH": f"{site}:{REPO}"}
    res = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env={**__import__("os").environ, **env}, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    # row 0: the config's loop (third-party); row 1: the row's agent_name (built-in tool_agent)
    assert got["stop"] == ["one_call_agent", "no_tool_call"]
    for messages in got["messages"]:
        assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
        assert messages[2]["content"] == "cba" and messages[3]["content"] == "It is cba."
    assert "reverse_text" in got["card"] and "Reverse a text." in got["card"]
