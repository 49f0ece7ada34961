"""The request rules without a model: messages for the template, history comparison, the sampling a request may ask for."""

from __future__ import annotations

import json

import pytest
from rl_agent.parsers import HermesParser
from rl_agent_openai.openai_format import Refused, history_key, template_messages
from rl_agent_openai.server import RunSampling, sampling_caps, stream_pieces

RUN = RunSampling(temperature=1.0, top_p=1.0, top_k=-1, stop=("###",), max_tokens_per_turn=48, tool_stop=("</tool_call>",))


def test_tool_calls_are_written_back_in_the_runs_format_and_tool_messages_named():
    msgs = [{"role": "developer", "content": "sys"}, {"role": "user", "content": [{"type": "text", "text": "2*3?"}]},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "calculator", "arguments": "{\"expression\": \"2*3\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "6"}]
    out = template_messages(msgs, HermesParser())
    assert out[0] == {"role": "system", "content": "sys"} and out[1] == {"role": "user", "content": "2*3?"}
    text = out[2]["content"]
    assert text.startswith("<tool_call>") and text.endswith("</tool_call>")
    content, calls = HermesParser().parse(text)  # the run's own parser reads it back
    assert content == "" and calls[0].name == "calculator" and calls[0].arguments == {"expression": "2*3"}
    assert out[3] == {"role": "tool", "content": "6", "name": "calculator"}
    assert template_messages(msgs, HermesParser(), start=3) == [out[3]]  # earlier messages are not rendered again


def test_history_ignores_what_clients_add_but_not_what_the_model_saw():
    ours = {"role": "assistant", "content": None, "tool_calls": [{"id": "x", "type": "function", "function": {"name": "f", "arguments": json.dumps({"a": 1, "b": 2})}}]}
    echoed = {"role": "assistant", "content": "", "refusal": None, "annotations": [], "tool_calls": [
        {"id": "x", "type": "function", "function": {"name": "f", "arguments": "{\"b\": 2, \"a\": 1}"}}]}
    assert history_key(ours, 0) == history_key(echoed, 0)
    changed = dict(echoed, tool_calls=[{"id": "x", "type": "function", "function": {"name": "f", "arguments": "{\"a\": 3}"}}])
    assert history_key(ours, 0) != history_key(changed, 0)
    with pytest.raises(Refused, match="only text content parts"):
        history_key({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}, 0)


@pytest.mark.parametrize("body, msg", [
    ({"temperature": 1.5}, "looser than the run's 1.0"),
    ({"temperature": 0.2}, "different from the run's 1.0"),
    ({"top_p": 0.9}, "top_p 0.9 differs"),
    ({"top_k": 5}, "top_k 5 differs"),
    ({"n": 3}, "n=3"),
    ({"presence_penalty": 0.5}, "presence_penalty"),
    ({"logit_bias": {"1": 5}}, "logit_bias"),
    ({"response_format": {"type": "json_object"}}, "response_format"),
    ({"tool_choice": {"type": "function", "function": {"name": "f"}}}, "tool_choice"),
    ({"max_tokens": 0}, "max_tokens must be a positive integer"),
    ({"stop": [""]}, "stop must be"),
])
def test_sampling_a_request_cannot_change_is_refused(body, msg):
    with pytest.raises(Refused, match=msg) as info:
        sampling_caps(body, RUN, chat=True)
    assert info.value.status == 400


def test_what_a_request_may_tighten():
    assert sampling_caps({}, RUN, chat=True) == (None, ())
    assert sampling_caps({"temperature": 1.0, "top_p": 1, "top_k": -1, "n": 1, "seed": 7, "tool_choice": "auto"}, RUN, chat=True) == (None, ())
    assert sampling_caps({"max_tokens": 100, "max_completion_tokens": 20, "stop": "END"}, RUN, chat=True) == (20, ("END",))
    greedy = RunSampling.of(type("P", (), {"greedy": True, "temperature": 1.0, "top_p": 0.5, "top_k": 3, "stop": ()})(),
                            type("M", (), {"max_tokens_per_turn": None, "stop_at_tool_call_end": True})(), HermesParser())
    assert greedy.temperature == 0.0 and sampling_caps({"temperature": 0}, greedy, chat=True) == (None, ())
    with pytest.raises(Refused, match="looser than the run's 0.0"):
        sampling_caps({"temperature": 0.7}, greedy, chat=True)


def test_stream_pieces_concatenate_to_the_text():
    table = {1: "a", 2: "\u00e9"[:1], 3: "b"}
    decode = lambda ids: "".join(table[i] for i in ids)  # noqa: E731
    assert "".join(stream_pieces(decode, [1, 2, 3], "a\u00e9b")) == "a\u00e9b"
    assert "".join(stream_pieces(decode, [1, 3], "ab-cut")) == "ab-cut"
