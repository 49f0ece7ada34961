"""The pieces between a rollout engine and the agent runner (rl_core.rollout.multi_turn) and the text rewards read."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from rl_core.batch import Batch
from rl_core.rollout.multi_turn import _generated, cut_at_stop, final_turn_mask
from rl_core.rollout.samples import Sample
from rl_core.trainer.loop import Trainer


class CharTokenizer:
    """id i <-> chr(i); id 0 is EOS (decoded as '' when special tokens are skipped)."""

    eos_token_id = 0

    def decode(self, ids, skip_special_tokens=False):
        return "".join("" if (i == 0 and skip_special_tokens) else ("<eos>" if i == 0 else chr(i)) for i in ids)


def ids(text: str) -> list[int]:
    return [ord(c) for c in text]


def test_cut_at_stop_keeps_the_completing_token_and_classifies_the_finish():
    tok = CharTokenizer()
    decode = lambda x: tok.decode(x)  # noqa: E731
    s = Sample(ids("ab</t>cd"), [-0.1] * 8, "length")
    cut = cut_at_stop(s, ("</t>",), decode)
    assert list(cut.token_ids) == ids("ab</t>") and cut.log_probs == (-0.1,) * 6 and cut.finish_reason == "stop"
    assert cut_at_stop(s, ("zz",), decode) is s
    eos = {0}
    assert _generated(cut, 10, eos).finish_reason == "stop"
    assert _generated(Sample(ids("ab") + [0], None, "stop"), 10, eos).finish_reason == "eos"
    long = _generated(Sample(ids("abcdef"), [-1.0] * 6, "length"), 4, eos)  # an engine that overshot the budget
    assert long.token_ids == tuple(ids("abcd")) and long.log_probs == (-1.0,) * 4 and long.finish_reason == "length"


def test_solution_str_of_a_multi_turn_row_is_its_last_assistant_turn():
    """Rewards read the final answer: not the tool call, the tool result or earlier turns (docs/agents.md)."""
    call, result, answer = ids("<call>2*3</call>"), ids("<tool>6</tool>"), ids("It is 6") + [0]
    single = ids("7 7")
    R = len(call) + len(result) + len(answer)
    responses = torch.zeros((2, R), dtype=torch.long)
    mask = torch.zeros((2, R), dtype=torch.long)
    responses[0] = torch.tensor(call + result + answer)
    mask[0] = torch.tensor([1] * len(call) + [0] * len(result) + [1] * len(answer))
    responses[1, : len(single)] = torch.tensor(single)
    mask[1, : len(single)] = 1
    assert final_turn_mask(mask)[0].tolist() == [0] * (len(call) + len(result)) + [1] * len(answer)
    assert torch.equal(final_turn_mask(mask)[1], mask[1].bool())
    batch = Batch({"responses": responses, "response_mask": mask}, {"extra_info": [{"agent": {"turns": [{}, {}]}}, {}]})
    texts = Trainer.decode_responses(SimpleNamespace(tokenizer=CharTokenizer()), batch)
    assert texts == ["It is 6", "7 7"]
    plain = Batch({"responses": responses, "response_mask": mask})  # no agent rows: every sampled token, as before
    assert Trainer.decode_responses(SimpleNamespace(tokenizer=CharTokenizer()), plain)[0] == "<call>2*3</call>It is 6"


def test_a_turn_s_requests_reach_the_engine_in_trajectory_order():
    """Whatever order the loops' tool calls finish in, each engine call lists the requests by trajectory (the
    same call on every run and on every rank of a TP group), and each loop gets its own answer back."""
    import asyncio

    from rl_agent.loop import Generated
    from rl_agent.runner import _Batcher, _run_loops

    calls = []

    def decode(prompts, budgets, stop):
        calls.append([p[0] for p in prompts])
        return [Generated((p[0] * 10,), None, "eos") for p in prompts]

    batcher = _Batcher(decode, ())

    async def loop(i: int, order: list):
        await asyncio.sleep(0)
        first = await batcher.generate([i], 4)
        for _ in range(order.index(i)):  # a "tool call" that finishes later for some trajectories than others
            await asyncio.sleep(0)
        second = await batcher.generate([i + 100], 4)
        return first.token_ids[0], second.token_ids[0]

    order = [2, 0, 3, 1]
    out = _run_loops(batcher, [loop(i, order) for i in range(4)])
    assert out == [(i * 10, (i + 100) * 10) for i in range(4)]
    assert calls == [[0, 1, 2, 3], [100, 101, 102, 103]]
