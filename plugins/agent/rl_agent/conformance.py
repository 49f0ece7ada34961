"""The rollout conformance suite's multi-turn case, a mixin a backend's ``RolloutConformance`` subclass adds.

Greedy decoding with a deterministic tool every turn (:mod:`rl_agent.testing`'s ``count_chars`` and
``every_turn`` format): the sampled ids exact, the inserted ids the chat template's delta, the masks, and
log-probs that match a plain forward pass.
"""

from __future__ import annotations

import attrs
import pytest
import torch

from rl_agent.testing import agent_context, count_chars, register_fixtures
from rl_core.backends import SamplingParams


class MultiTurnConformance:
    """The rollout conformance suite's multi-turn case: add it to a backend's ``RolloutConformance`` subclass
    (``class TestMine(RolloutConformance, MultiTurnConformance)``) with ``supports_multi_turn = True``; its
    ``make_engine(model_dir, config, context=None)`` builds the engine with ``context`` when given (it carries the
    agent runtime: :func:`agent_context`)."""

    supports_multi_turn: bool = False

    def test_multi_turn_token_exact(self, model_dir, reference):
        """Greedy, a deterministic tool every turn: sampled ids exact, inserted ids = the template's delta, masks, log-probs."""
        if not self.supports_multi_turn:
            pytest.skip("this backend has no multi-turn (agent) rollout")
        import numpy as np

        from rl_agent.chat import ChatDelta
        from rl_agent.config import MultiTurnConfig
        from rl_core.config.sections import evolve_key
        from rl_core.modeling import load_tokenizer

        register_fixtures()
        turns, per_turn, R = 3, 3, 96
        base = self.make_config(model_dir)
        RolloutConfig = type(base.rollout)
        mt = MultiTurnConfig(enable=True, tools=["count_chars"], format="every_turn", max_assistant_turns=turns, max_tokens_per_turn=per_turn, check_tokens=True)
        config = evolve_key(attrs.evolve(base, rollout=RolloutConfig()), "rollout.multi_turn", mt)
        texts = ("hi", "abc")
        messages = [[{"role": "user", "content": t}] for t in texts]
        tok = load_tokenizer(model_dir)
        batch = self.prompt_batch(model_dir, [tok.apply_chat_template(m, tokenize=False, add_generation_prompt=True) for m in messages])
        raw = np.empty(len(texts), dtype=object)
        raw[:] = messages
        batch.non_tensors["raw_prompt"] = raw
        engine = self.make_engine(model_dir, config, context=agent_context(config))
        try:
            params = SamplingParams(n=1, max_new_tokens=R, greedy=True, logprobs=True)
            out = engine.generate(batch, params)
            again = engine.generate(batch, params)
        finally:
            engine.shutdown()
        t = out.tensors
        P = batch.tensors["input_ids"].shape[1]
        assert torch.equal(t["responses"], again.tensors["responses"]), "greedy multi-turn rollouts must repeat exactly"
        rm, am = t["response_mask"], t["attention_mask"][:, P:]
        assert torch.all(rm <= am), "response_mask is 1 only on real tokens"
        assert torch.equal(t["input_ids"][:, P:], t["responses"])
        chat = ChatDelta(tok, None)
        for row in range(len(texts)):
            info = out.non_tensors["extra_info"][row]
            agent = info["agent"]
            assert agent["stop_reason"] == "max_assistant_turns" and len(agent["turns"]) == turns
            assert agent["token_check"] is None, agent["token_check"]
            ids, mask = t["responses"][row][am[row].bool()].tolist(), rm[row][am[row].bool()].tolist()
            # sampled blocks of per_turn tokens, then the template's delta for the tool message, exactly
            pos = 0
            for k, turn in enumerate(agent["turns"]):
                assert mask[pos : pos + turn["sampled"]] == [1] * turn["sampled"]
                sampled = ids[pos : pos + turn["sampled"]]
                pos += turn["sampled"]
                if k == turns - 1:
                    break
                tool_text = count_chars(tok.decode(sampled, skip_special_tokens=False))
                assert turn["tool_results"][0]["text"] == tool_text
                expect = chat.inserted_ids([{"role": "tool", "name": "count_chars", "content": tool_text}], ended_with_eos=sampled[-1] == self.eos_id)
                assert ids[pos : pos + len(expect)] == expect and mask[pos : pos + len(expect)] == [0] * len(expect)
                pos += len(expect)
            assert pos == len(ids)
            assert [m["role"] for m in info["messages"]] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
        # the engine saw exactly these tokens: its log-probs are a plain forward pass's over the whole trajectory,
        # and each sampled token is that forward pass's argmax
        m = rm.bool()
        ref = self.reference_log_probs(reference, out)
        lp = t["rollout_log_probs"]
        assert torch.all(lp[~m] == 0), "log-probs are 0 on inserted tokens and padding"
        torch.testing.assert_close(lp[m], ref[m], atol=self.logprob_atol, rtol=0)
        if self.greedy_exact:
            with torch.no_grad():
                pos_ids = (t["attention_mask"].long().cumsum(-1) - 1).clamp(min=0)
                logits = reference(input_ids=t["input_ids"], attention_mask=t["attention_mask"], position_ids=pos_ids).logits[:, P - 1 : -1]
            assert torch.equal(logits.argmax(-1)[m], t["responses"][m])
        assert out.meta["agent/turns"] == turns * len(texts) and out.meta["agent/tool_calls"] == (turns - 1) * len(texts)
        assert out.meta.get("agent/token_check_mismatches", 0) == 0
