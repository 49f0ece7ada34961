"""Conformance tests every rollout backend runs (langchain standard-tests style).

A backend's test module subclasses :class:`RolloutConformance` and says how
to build its engine::

    from rl_core_testing.rollout_conformance import RolloutConformance

    class TestMyRollout(RolloutConformance):
        logprob_atol = 1e-3              # capabilities / tolerances: class attributes

        def make_engine(self, model_dir, config):
            return MyEngine(config, WorkerContext())

Every backend gets the same inputs and the same assertions, checked against
independent references: a plain ``transformers`` forward pass of the same
weights (log-probs, greedy tokens) and a tiny model whose next token is
known by construction (:func:`rl_core_testing.tiny_model.bigram_weights`:
EOS handling, masks, stop strings, weight loading).

Class attributes a subclass may change:

``logprob_atol``        log-prob tolerance vs the forward pass (1e-5 suits fp32 HF)
``arch``, ``hidden``,   the tiny model (vLLM's CPU kernels want head_dim 32+,
``heads``, ``kv_heads`` e.g. ``hidden=128``)
``supports_stop_strings``  ``SamplingParams.stop`` honoured
``supports_chunking``   ``rollout.generation_batch_size`` honoured
``greedy_exact``        greedy tokens equal the reference's (False for engines
                        whose kernels round differently enough to flip ties)
``supports_multi_turn`` ``rollout.multi_turn.enable`` honoured (agentic rollouts): the
                        multi-turn case is the agent plugin's mixin
                        (rl-agent's ``conformance.MultiTurnConformance``), which
                        skips otherwise
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest
import torch
from rl_core.backends import RolloutEngine, SamplingParams
from rl_core.batch import Batch
from rl_core.config.schema import DataConfig, ModelConfig, RolloutConfig, RunConfig

from rl_core_testing.distributed import torch_threads as _threads
from rl_core_testing.tiny_model import (
    EOS_ID,
    PAD_ID,
    bigram_weights,
    make_tiny_model_dir,
)

PROMPTS = ("What is 2+3?", "hi", "Count: 1, 2, 3,", "abc")


def char_id(ch: str) -> int:
    """Token id of a one-byte character in the tiny byte-level tokenizer."""
    return 3 + ord(ch.encode()[0:1])


def encode_prompts(model_dir: str | Path, prompts=PROMPTS) -> dict[str, torch.Tensor]:
    """Left-padded ``input_ids`` / ``attention_mask`` for ``prompts``."""
    from rl_core.modeling import load_tokenizer

    tok = load_tokenizer(model_dir)
    enc = tok(list(prompts), padding=True, return_tensors="pt")
    return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}


def prompt_batch(model_dir: str | Path, prompts=PROMPTS) -> Batch:
    enc = encode_prompts(model_dir, prompts)
    uids = [f"p{i}" for i in range(len(prompts))]
    return Batch(
        {**enc, "index": torch.arange(len(prompts))},
        {"uid": uids, "ground_truth": [str(i) for i in range(len(prompts))]},
        {"step": 7},
    )


def reference_model(model_dir: str | Path, state_dict: dict[str, torch.Tensor] | None = None):
    """A plain ``transformers`` model in float32 (optionally with other weights), eval mode."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    if state_dict is not None:
        missing, unexpected = model.load_state_dict(state_dict, strict=False)
        assert not unexpected, unexpected
    model.eval()
    return model


@torch.no_grad()
def reference_log_probs(model, out: Batch, temperature: float = 1.0) -> torch.Tensor:
    """``log_softmax(logits / T)`` of each response token from one full forward pass ``[B, R]``."""
    R = out.tensors["responses"].shape[1]
    mask = out.tensors["attention_mask"]
    positions = (mask.long().cumsum(-1) - 1).clamp(min=0)  # independent of the engine's position_ids
    logits = model(input_ids=out.tensors["input_ids"], attention_mask=mask, position_ids=positions).logits[:, -R - 1 : -1].float()
    return torch.log_softmax(logits / temperature, dim=-1).gather(-1, out.tensors["responses"].unsqueeze(-1)).squeeze(-1)


@torch.no_grad()
def reference_greedy(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, steps: int) -> torch.Tensor:
    """Greedy tokens ``[B, steps]`` by full forward passes (no KV cache), positions ``cumsum(mask) - 1``."""
    ids, mask = input_ids, attention_mask
    for _ in range(steps):
        pos = (mask.long().cumsum(-1) - 1).clamp(min=0)
        nxt = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits[:, -1].argmax(-1)
        ids = torch.cat([ids, nxt[:, None]], dim=1)
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
    return ids[:, input_ids.shape[1] :]


class RolloutConformance:
    """Base class: subclass it in a ``Test*`` class and implement :meth:`make_engine`."""

    logprob_atol: float = 1e-5
    torch_threads: int | None = 1
    arch: str = "llama"
    hidden: int = 64
    heads: int = 4
    kv_heads: int = 2
    supports_stop_strings: bool = True
    supports_chunking: bool = True
    greedy_exact: bool = True
    supports_multi_turn: bool = False
    # for mixins of other packages (e.g. rl-agent's MultiTurnConformance), which import no core test kit
    prompt_batch = staticmethod(prompt_batch)
    reference_log_probs = staticmethod(reference_log_probs)
    eos_id = EOS_ID
    max_prompt_length: int = 32

    # ------------------------------------------------------------ to provide
    def make_engine(self, model_dir: Path, config: RunConfig) -> RolloutEngine:
        raise NotImplementedError("subclasses return their engine built for `config` (model.path = model_dir)")

    def make_config(self, model_dir: Path, **rollout: Any) -> RunConfig:
        return RunConfig(
            model=ModelConfig(path=str(model_dir)),
            data=DataConfig(max_prompt_length=self.max_prompt_length),
            rollout=RolloutConfig(**rollout),
        )

    # --------------------------------------------------------------- fixtures
    @pytest.fixture(scope="class", autouse=True)
    def _torch_threads(self):
        """``torch_threads`` intra-op threads in this process while the class runs (None: leave as is)."""
        with _threads(self.torch_threads):
            yield

    @pytest.fixture(scope="class")
    def model_dir(self, tmp_path_factory) -> Path:
        return make_tiny_model_dir(
            tmp_path_factory.mktemp("rollout_model"), self.arch, hidden=self.hidden, heads=self.heads, kv_heads=self.kv_heads, seed=0
        )

    @pytest.fixture(scope="class")
    def engine(self, model_dir):
        eng = self.make_engine(model_dir, self.make_config(model_dir))
        yield eng
        eng.shutdown()

    @pytest.fixture
    def fresh_engine(self, model_dir):
        """An engine whose weights a test may change."""
        eng = self.make_engine(model_dir, self.make_config(model_dir))
        yield eng
        eng.shutdown()

    @pytest.fixture(scope="class")
    def reference(self, model_dir):
        return reference_model(model_dir)

    @pytest.fixture(scope="class")
    def prompts(self, model_dir) -> Batch:
        return prompt_batch(model_dir)

    # ------------------------------------------------------------------ tests
    def test_is_a_rollout_engine(self, engine):
        assert isinstance(engine, RolloutEngine)

    def test_output_contract(self, engine, prompts):
        n, R = 2, 8
        out = engine.generate(prompts, SamplingParams(n=n, max_new_tokens=R, temperature=1.0, seed=3))
        B, P = prompts.tensors["input_ids"].shape
        t = out.tensors
        assert len(out) == B * n
        assert t["prompts"].shape == (B * n, P)
        assert t["responses"].shape == (B * n, R)
        for key in ("input_ids", "attention_mask", "position_ids"):
            assert t[key].shape == (B * n, P + R), key
        assert t["response_mask"].shape == (B * n, R)
        assert "rollout_log_probs" not in t.keys()
        # the n samples of a prompt are adjacent; prompts and their masks are carried over unchanged
        assert torch.equal(t["prompts"], prompts.tensors["input_ids"].repeat_interleave(n, 0))
        assert torch.equal(t["attention_mask"][:, :P], prompts.tensors["attention_mask"].repeat_interleave(n, 0))
        assert torch.equal(t["input_ids"], torch.cat([t["prompts"], t["responses"]], 1))
        assert torch.equal(t["attention_mask"][:, P:], t["response_mask"])
        assert torch.equal(t["index"], prompts.tensors["index"].repeat_interleave(n, 0))
        assert list(out.non_tensors["uid"]) == [u for u in prompts.non_tensors["uid"] for _ in range(n)]
        assert list(out.non_tensors["ground_truth"]) == [g for g in prompts.non_tensors["ground_truth"] for _ in range(n)]
        assert out.meta.get("step") == 7
        # response_mask: ones then zeros; after the end only pad tokens; an ended response ends with EOS
        rm = t["response_mask"]
        assert set(rm.unique().tolist()) <= {0, 1}
        assert torch.all(rm[:, 1:] <= rm[:, :-1]), "response_mask must be 1s followed by 0s"
        assert torch.all(rm[:, 0] == 1), "every response has at least one token"
        lengths = rm.sum(-1)
        for i in range(B * n):
            L = int(lengths[i])
            assert torch.all(t["responses"][i, L:] == PAD_ID), f"row {i}: tokens after the response must be padding"
            if L < R:
                assert int(t["responses"][i, L - 1]) == EOS_ID, f"row {i} ended early without EOS"
        # positions of real tokens are cumsum(mask) - 1
        am = t["attention_mask"]
        expect = (am.long().cumsum(-1) - 1).clamp(min=0)
        assert torch.equal(t["position_ids"][am.bool()], expect[am.bool()])

    def test_greedy_matches_transformers(self, engine, prompts, reference):
        if not self.greedy_exact:
            pytest.skip("this backend's kernels are not expected to reproduce transformers' greedy tokens exactly")
        R = 10
        out = engine.generate(prompts, SamplingParams(n=1, max_new_tokens=R, greedy=True))
        ref = reference_greedy(reference, prompts.tensors["input_ids"], prompts.tensors["attention_mask"], R)
        rm = out.tensors["response_mask"].bool()
        assert torch.equal(out.tensors["responses"][rm], ref[rm])

    def test_greedy_is_deterministic(self, engine, prompts):
        params = SamplingParams(n=2, max_new_tokens=8, greedy=True, temperature=0.7)
        a = engine.generate(prompts, params).tensors["responses"]
        b = engine.generate(prompts, params).tensors["responses"]
        assert torch.equal(a, b)
        assert torch.equal(a[0::2], a[1::2]), "greedy samples of one prompt must be identical"
        zero_temp = engine.generate(prompts, SamplingParams(n=1, max_new_tokens=8, temperature=0.0)).tensors["responses"]
        assert torch.equal(zero_temp, a[0::2]), "temperature 0 decodes greedily"

    def test_seed_determinism(self, engine, prompts):
        params = SamplingParams(n=3, max_new_tokens=12, temperature=1.0, seed=1234)
        a = engine.generate(prompts, params).tensors["responses"]
        b = engine.generate(prompts, params).tensors["responses"]
        c = engine.generate(prompts, attrs.evolve(params, seed=99)).tensors["responses"]
        assert torch.equal(a, b), "the same seed must give the same samples"
        assert not torch.equal(a, c), "different seeds gave identical samples"
        assert not torch.equal(a[0::3], a[1::3]), "the n samples of a prompt should differ when sampling"

    @pytest.mark.parametrize("temperature,top_k,top_p", [(1.0, -1, 1.0), (0.7, 20, 0.9)])
    def test_log_probs_match_forward_pass(self, engine, prompts, reference, temperature, top_k, top_p):
        out = engine.generate(
            prompts, SamplingParams(n=2, max_new_tokens=10, temperature=temperature, top_k=top_k, top_p=top_p, logprobs=True, seed=5)
        )
        lp = out.tensors["rollout_log_probs"]
        rm = out.tensors["response_mask"].bool()
        ref = reference_log_probs(reference, out, temperature)
        assert lp.shape == rm.shape
        assert torch.all(lp[~rm] == 0), "log-probs must be 0 on padding"
        torch.testing.assert_close(lp[rm], ref[rm], atol=self.logprob_atol, rtol=0)

    def test_greedy_log_probs_use_temperature_one(self, engine, prompts, reference):
        out = engine.generate(prompts, SamplingParams(n=1, max_new_tokens=6, greedy=True, temperature=0.5, logprobs=True))
        rm = out.tensors["response_mask"].bool()
        ref = reference_log_probs(reference, out, 1.0)
        torch.testing.assert_close(out.tensors["rollout_log_probs"][rm], ref[rm], atol=self.logprob_atol, rtol=0)

    def test_top_k_one_and_tiny_top_p_are_greedy(self, engine, prompts):
        greedy = engine.generate(prompts, SamplingParams(n=1, max_new_tokens=8, greedy=True)).tensors["responses"]
        top_k = engine.generate(prompts, SamplingParams(n=2, max_new_tokens=8, temperature=1.0, top_k=1, seed=0)).tensors["responses"]
        top_p = engine.generate(prompts, SamplingParams(n=2, max_new_tokens=8, temperature=1.0, top_p=1e-6, seed=0)).tensors["responses"]
        assert torch.equal(top_k[0::2], greedy) and torch.equal(top_k[1::2], greedy)
        assert torch.equal(top_p[0::2], greedy) and torch.equal(top_p[1::2], greedy)

    def test_chunked_generation_equals_whole(self, model_dir, engine, prompts):
        if not self.supports_chunking:
            pytest.skip("backend does not chunk by rollout.generation_batch_size")
        chunked = self.make_engine(model_dir, self.make_config(model_dir, generation_batch_size=2))
        try:
            params = SamplingParams(n=2, max_new_tokens=8, greedy=True, logprobs=True)
            a = engine.generate(prompts, params)
            b = chunked.generate(prompts, params)
        finally:
            chunked.shutdown()
        assert torch.equal(a.tensors["responses"], b.tensors["responses"])
        torch.testing.assert_close(a.tensors["rollout_log_probs"], b.tensors["rollout_log_probs"], atol=self.logprob_atol, rtol=0)

    # ------------------------------------------------ known-answer model (bigram)
    def _bigram_engine(self, engine, model_dir, successor):
        if self.arch != "llama":
            pytest.skip("the bigram model needs untied embeddings (arch='llama')")
        engine.load_weights(bigram_weights(model_dir, successor).items())
        return engine

    def test_eos_ends_the_response(self, fresh_engine, model_dir):
        a, b, _c = char_id("a"), char_id("b"), char_id("c")
        R = 6
        chain_c = [char_id(ch) for ch in "cdefghijkl"]
        successor = {a: char_id("x"), char_id("x"): char_id("y"), char_id("y"): EOS_ID, b: EOS_ID}
        successor.update({chain_c[i]: chain_c[i + 1] for i in range(len(chain_c) - 1)})
        eng = self._bigram_engine(fresh_engine, model_dir, successor)
        batch = prompt_batch(model_dir, ("a", "zzb", "c"))  # different lengths: left padding
        expected = [
            [char_id("x"), char_id("y"), EOS_ID, PAD_ID, PAD_ID, PAD_ID],
            [EOS_ID, PAD_ID, PAD_ID, PAD_ID, PAD_ID, PAD_ID],
            chain_c[1 : 1 + R],
        ]
        expected_mask = [[1, 1, 1, 0, 0, 0], [1, 0, 0, 0, 0, 0], [1] * R]
        for params in (SamplingParams(n=2, max_new_tokens=R, greedy=True), SamplingParams(n=2, max_new_tokens=R, temperature=1.0, seed=0)):
            out = eng.generate(batch, params)
            assert out.tensors["responses"].tolist() == [row for row in expected for _ in range(2)], params
            assert out.tensors["response_mask"].tolist() == [row for row in expected_mask for _ in range(2)], params

    def test_stop_strings(self, fresh_engine, model_dir):
        if not self.supports_stop_strings:
            pytest.skip("backend does not support stop strings")
        text = "abcdefgh"
        successor = {char_id(text[i]): char_id(text[i + 1]) for i in range(len(text) - 1)}
        successor[char_id("h")] = char_id("i")
        eng = self._bigram_engine(fresh_engine, model_dir, successor)
        batch = prompt_batch(model_dir, ("a", "c"))
        out = eng.generate(batch, SamplingParams(n=1, max_new_tokens=6, greedy=True, stop=("de",)))
        rm = out.tensors["response_mask"].tolist()
        assert out.tensors["responses"][0, :4].tolist() == [char_id(ch) for ch in "bcde"]
        assert rm[0] == [1, 1, 1, 1, 0, 0], "the response ends with the token that completes the stop string"
        assert rm[1] == [1, 1, 0, 0, 0, 0]
        assert torch.all(out.tensors["responses"][0, 4:] == PAD_ID)

    # ------------------------------------------------------------ weight sync
    def test_load_weights_then_log_probs_match_new_weights(self, fresh_engine, model_dir, prompts):
        from safetensors.torch import load_file

        base = load_file(str(Path(model_dir) / "model.safetensors"))
        gen = torch.Generator().manual_seed(7)
        new = {k: v + 0.05 * torch.randn(v.shape, generator=gen) for k, v in base.items()}
        params = SamplingParams(n=2, max_new_tokens=8, temperature=1.0, logprobs=True, seed=11)
        before = fresh_engine.generate(prompts, params)
        fresh_engine.load_weights(iter(new.items()))
        after = fresh_engine.generate(prompts, params)
        ref_new = reference_model(model_dir, new)
        rm = after.tensors["response_mask"].bool()
        torch.testing.assert_close(after.tensors["rollout_log_probs"][rm], reference_log_probs(ref_new, after)[rm], atol=self.logprob_atol, rtol=0)
        assert not torch.allclose(before.tensors["rollout_log_probs"], after.tensors["rollout_log_probs"]), "weights did not change"

    def test_load_weights_rejects_unknown_names_and_shapes(self, fresh_engine, model_dir):
        from safetensors.torch import load_file

        base = load_file(str(Path(model_dir) / "model.safetensors"))
        with pytest.raises(Exception, match="model.layers.99.mlp.up_proj.weight"):
            fresh_engine.load_weights([("model.layers.99.mlp.up_proj.weight", torch.zeros(2, 2))])
        name = "model.norm.weight"
        with pytest.raises(Exception, match=r"model\.norm\.weight.*shape|shape.*model\.norm\.weight"):
            fresh_engine.load_weights([(name, torch.zeros(base[name].shape[0] + 1))])

    # -------------------------------------------------------------- inputs
    def test_prompt_longer_than_limit_is_a_clear_error(self, engine, model_dir):
        long = "x" * (self.max_prompt_length + 5)
        batch = prompt_batch(model_dir, ("ok", long))
        with pytest.raises(ValueError) as err:
            engine.generate(batch, SamplingParams(n=1, max_new_tokens=2))
        msg = str(err.value)
        assert "prompt 1" in msg and str(self.max_prompt_length + 5) in msg and str(self.max_prompt_length) in msg
        assert "max_prompt_length" in msg

    def test_sleep_and_wake_up_keep_the_weights(self, engine, prompts):
        params = SamplingParams(n=1, max_new_tokens=6, greedy=True)
        before = engine.generate(prompts, params).tensors["responses"]
        engine.sleep()
        engine.wake_up()
        assert torch.equal(engine.generate(prompts, params).tensors["responses"], before)
