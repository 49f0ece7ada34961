"""The endpoint driven by the real ``openai`` client from agent programs (tests/agent_programs.py), on the hf rollout
backend with a tiny random model; the engine's own decode calls are recorded (conftest.Recording) as the reference
for what it saw and produced.

vLLM / SGLang: the same tests run on their CPU engines where those are installed (their own venvs,
.ci/engine_venv.sh); here they skip with the reason.
"""

from __future__ import annotations

import json
import socket
import subprocess

import pytest
import torch
from openai_testkit import run_rollout

pytest.importorskip("openai", reason="the tests drive the endpoint with the openai client (pip install -e 'plugins/openai_agent[test]')")


def _engines():
    out = [pytest.param("hf", id="hf")]
    for name, module in (("vllm", "vllm"), ("sglang", "sglang")):
        try:
            __import__(module)
            out.append(pytest.param(name, id=name))
        except Exception:  # noqa: BLE001 - not installed, or installed without its CPU build
            out.append(pytest.param(name, id=name, marks=pytest.mark.skip(reason=f"{module} is not installed in this venv "
                                                                         f"(its CPU engine venv: bash .ci/engine_venv.sh {name})")))
    return out


def _row(batch, r: int):
    """(prompt ids, response ids, response mask, rollout log-probs) of row ``r``, padding removed."""
    R = batch["responses"].shape[1]
    attn = batch["attention_mask"][r]
    prompt = batch["input_ids"][r, :-R][attn[:-R].bool()].tolist()
    k = int(attn[-R:].sum())
    return prompt, batch["responses"][r, :k].tolist(), batch["response_mask"][r, :k].tolist(), batch["rollout_log_probs"][r, :k].tolist()


@pytest.mark.parametrize("backend", _engines())
def test_three_call_session_is_token_exact(engine_model_dir, backend):
    """Tools (rendered, calls parsed back), streaming off then on, logprobs; the trainer's row for the 3-call session is
    exactly the last call's input + output, each call extends the previous one by the engine's output and the agent's
    inserted text, and the masked tokens are exactly that inserted text."""
    batch, rec, tok = run_rollout(engine_model_dir, {"callable": "three_calls", "timeout_s": 120}, R=300, backend=backend)
    agent = batch.non_tensors["extra_info"][0]["agent"]
    assert agent["status"] == "ok", agent["output_tail"]
    assert len(rec.calls) == 3 and len(agent["turns"]) == 3
    seen = agent["result"]["seen"]
    (p1, o1, l1, _), (p2, o2, l2, _), (p3, o3, l3, _) = rec.calls
    # call 1: the tools rendered by the chat template into what the engine saw
    assert "TOOLS: count_chars: Count the characters of a text (TOOLDESC)." in tok.decode(p1)
    assert "agent/tools_ignored_by_template" not in batch.meta
    # the trainer's tokens = the last call's input + output; each call's input continues the one before
    prompt, resp, mask, lps = _row(batch, 0)
    assert prompt == p1
    assert prompt + resp == p3 + o3
    assert p2[: len(p1) + len(o1)] == p1 + o1 and p3[: len(p2) + len(o2)] == p2 + o2
    gap2, gap3 = p2[len(p1) + len(o1) :], p3[len(p2) + len(o2) :]
    assert mask == [1] * len(o1) + [0] * len(gap2) + [1] * len(o2) + [0] * len(gap3) + [1] * len(o3)
    # log-probs: the engine's, on sampled tokens; 0 on inserted ones
    want = l1 + [0.0] * len(gap2) + l2 + [0.0] * len(gap3) + l3
    assert torch.allclose(torch.tensor(lps), torch.tensor(want))
    assert seen[0]["logprobs"] == pytest.approx(l1, abs=1e-6)
    # the masked tokens are exactly the agent's text between calls, as the template renders it after an assistant turn
    msgs = agent["result"]["messages"]
    first_tool = msgs.index(next(m for m in msgs if m["role"] == "tool"))

    def after_assistant(new):  # the template's text after an assistant message, for these new messages (independent of the session code)
        mark = "\u2063MARK\u2063"
        text = tok.apply_chat_template([{"role": "user", "content": "u"}, {"role": "assistant", "content": mark}] + new, tokenize=False, add_generation_prompt=True)
        return text[text.index(mark) + len(mark) :]

    new2 = [{"role": "tool", "name": "count_chars", "content": "RESULT-count_chars-42"}]
    new3 = [{"role": "tool", "name": "count_chars", "content": "SECOND-RESULT"}, {"role": "user", "content": "USER-NUDGE: answer now."}]
    assert msgs[first_tool]["content"] == "RESULT-count_chars-42"
    assert tok.decode(gap2) == after_assistant(new2) and gap2 == tok.encode(after_assistant(new2), add_special_tokens=False)
    assert tok.decode(gap3) == after_assistant(new3) and gap3 == tok.encode(after_assistant(new3), add_special_tokens=False)
    # the responses the client got: tool calls parsed back with the run's format (every_turn: each turn one call)
    assert seen[0]["finish"] == "tool_calls" and seen[0]["calls"][0]["function"]["name"] == "count_chars"
    assert json.loads(seen[0]["calls"][0]["function"]["arguments"]) == {"text": tok.decode(o1)}
    assert seen[0]["usage"] == {"prompt_tokens": len(p1), "completion_tokens": len(o1), "total_tokens": len(p1) + len(o1),
                                "completion_tokens_details": None, "prompt_tokens_details": None}
    # streamed: the same parse arrives as chunks (role, content pieces, tool call, finish) and the usage
    assert seen[1]["chunks"] >= 4 and seen[1]["finish"] == "tool_calls" and seen[1]["calls"][0]["name"] == "count_chars"
    assert json.loads(seen[1]["calls"][0]["arguments"]) == {"text": tok.decode(o2)}
    assert seen[1]["usage"]["prompt_tokens"] == len(p2) and seen[1]["usage"]["completion_tokens"] == len(o2)
    # budgets: the request's max_tokens caps each call
    assert (len(o1), len(o2), len(o3)) == (6, 5, 4)
    # the program's returned reward; the task handed to the program hid the reward's ground truth
    assert agent["reward"] == 0.5
    assert batch.non_tensors["extra_info"][0]["reward_model"] == {"ground_truth": "SECRET"}


def test_stop_sequences(model_dir):
    """Greedy (validation settings): the same call with a stop string taken from the unstopped text ends right there,
    the text returned without it, finish_reason stop."""
    free, _, _ = run_rollout(model_dir, {"callable": "plain"}, greedy=True, temperature=0.0, R=64)
    text = free.non_tensors["extra_info"][0]["agent"]["result"]["text"]
    cut = next(i for i in range(1, len(text) - 1) if text[i].isascii() and text[i].isprintable() and text.find(text[i]) == i)
    stop = text[cut]
    stopped, rec, tok = run_rollout(model_dir, {"callable": "plain", "env": {"TEST_STOP": stop}}, greedy=True, temperature=0.0, R=64)
    res = stopped.non_tensors["extra_info"][0]["agent"]["result"]
    assert res == {"text": text[:cut], "finish": "stop"}
    (_, out, _, stops), = rec.calls
    assert stop in stops  # the engine got the stop string (added to the run's rollout.stop)
    assert stop in tok.decode(out) and stop not in tok.decode(out[:-1])  # its tokens end where the stop string completes


@pytest.mark.parametrize("backend", _engines())
def test_stop_sequence_on_every_backend(engine_model_dir, backend):
    """The run's engine applies a program's stop string: greedy, the same call with a stop string cut from the unstopped
    text (its characters 1-2) ends where that string first completes, returns the text before it, finish_reason stop."""
    free, _, _ = run_rollout(engine_model_dir, {"callable": "plain"}, greedy=True, temperature=0.0, R=64, backend=backend)
    text = free.non_tensors["extra_info"][0]["agent"]["result"]["text"]
    assert len(text) >= 3, text
    stop = text[1:3]
    stopped, rec, tok = run_rollout(engine_model_dir, {"callable": "plain", "env": {"TEST_STOP": stop}}, greedy=True, temperature=0.0, R=64,
                                    backend=backend)
    # the text before the stop string; an empty message's content is null, as OpenAI's API returns it
    assert stopped.non_tensors["extra_info"][0]["agent"]["result"] == {"text": text[: text.find(stop)] or None, "finish": "stop"}
    (_, out, _, stops), = rec.calls
    assert stop in stops and stop in tok.decode(out)


def test_refusals(model_dir):
    """A looser temperature, n=2, a forced tool, a wrong token, no session, a rewritten history: refused with the reason."""
    batch, rec, _ = run_rollout(model_dir, {"callable": "refusals"}, R=64)
    agent = batch.non_tensors["extra_info"][0]["agent"]
    assert agent["status"] == "ok", agent["output_tail"]
    out = agent["result"]["refusals"]
    assert out["loose_temperature"]["status"] == 400 and "temperature 1.5 is looser than the run's 1.0" in out["loose_temperature"]["message"]
    assert out["two_samples"]["status"] == 400 and "n=2" in out["two_samples"]["message"]
    assert out["forced_tool"]["status"] == 400 and "tool_choice" in out["forced_tool"]["message"]
    assert out["wrong_token"]["status"] == 401 and "API key" in out["wrong_token"]["message"]
    assert out["no_session"]["status"] == 404 and "session" in out["no_session"]["message"]
    assert out["same_temperature"]["status"] == 200
    assert out["rewrite"]["status"] == 400 and "do not extend this session's conversation" in out["rewrite"]["message"]
    assert len(rec.calls) == 1  # only the call with the run's own settings reached the engine
    prompt, resp, mask, _ = _row(batch, 0)
    assert prompt + resp == rec.calls[0][0] + rec.calls[0][1] and all(mask)


def test_completions_text_stream_and_rewrite(model_dir):
    batch, rec, tok = run_rollout(model_dir, {"callable": "completions"}, R=64)
    agent = batch.non_tensors["extra_info"][0]["agent"]
    assert agent["status"] == "ok", agent["output_tail"]
    res = agent["result"]
    (p1, o1, _, _), (p2, o2, _, _) = rec.calls
    assert p1 == tok.encode("Once upon") and tok.decode(o1) == res["t1"] and len(o1) == 5
    gap = tok.encode(" AGENT-TEXT", add_special_tokens=False)
    assert p2 == p1 + o1 + gap and tok.decode(o2) == res["t2"] and len(o2) == 4
    assert res["rewrite"]["status"] == 400
    prompt, resp, mask, _ = _row(batch, 0)
    assert prompt + resp == p2 + o2 and mask == [1] * 5 + [0] * len(gap) + [1] * 4


def test_nothing_listens_beyond_loopback():
    """The server binds 127.0.0.1 only: /proc/net/tcp lists its port on loopback, and the machine's other addresses refuse."""
    from rl_agent_openai.server import Endpoint, RunSampling, serve, stop

    ep = Endpoint(tokenizer=None, parser=None, run=RunSampling(1.0, 1.0, -1, (), None, ()), sessions={}, eos_ids=[], max_request_bytes=10, submit=lambda r: None)
    server, url = serve(ep, "t" * 16)
    try:
        port = server.server_address[1]
        assert url == f"http://127.0.0.1:{port}"
        listening = []
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            try:
                lines = open(table).read().splitlines()[1:]
            except OSError:
                continue
            for line in lines:
                local, state = line.split()[1], line.split()[3]
                if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                    listening.append(local.rsplit(":", 1)[0])
        assert listening == ["0100007F"]  # 127.0.0.1, nothing else (no 0.0.0.0, no IPv6)
        others = [a for a in subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split() if not a.startswith("127.")]
        for addr in others:
            family = socket.AF_INET6 if ":" in addr else socket.AF_INET
            with socket.socket(family, socket.SOCK_STREAM) as s:
                s.settimeout(2)
                assert s.connect_ex((addr, port)) != 0, f"the endpoint answered on {addr}"
    finally:
        stop(server)
