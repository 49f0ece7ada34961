"""The static-cache decode loop (rl_hf_decode.static_decode), run on CPU without graph capture.

Same greedy tokens, same seeded samples and the same log-probs as the plain
transformers loop; and the whole rollout conformance suite with it switched on.
"""

from __future__ import annotations

import attrs
import pytest
import torch
from rl_core.backends import SamplingParams, WorkerContext
from rl_core.config.schema import DataConfig, ModelConfig, RolloutConfig, RunConfig
from rl_core.rollout.hf import factory
from rl_hf_decode.static_decode import StaticDecoder, unsupported_reason
from rl_hf_decode.feature import FEATURE
from rl_core_testing.rollout_conformance import RolloutConformance, prompt_batch

FEATURES = {"hf_decode": FEATURE}  # the Plan's feature, as a worker hands it to its engines

pytestmark = pytest.mark.usefixtures("one_thread")

PROMPTS = ["hi", "what is 2+2?", "a much longer prompt than the others, to pad"]


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def model_dir(request, tiny_model_dir):
    return tiny_model_dir(request.param)


def _engine(model_dir, static: bool):
    cfg = RunConfig(model=ModelConfig(path=str(model_dir)), data=DataConfig(max_prompt_length=64), rollout=RolloutConfig(engine_kwargs={"static_decode": static}))
    return factory(cfg, WorkerContext(features=FEATURES))


def test_default_is_the_plain_loop_on_cpu(model_dir):
    cfg = RunConfig(model=ModelConfig(path=str(model_dir)), data=DataConfig(max_prompt_length=64))
    assert factory(cfg, WorkerContext(features=FEATURES)).static is None
    assert isinstance(_engine(model_dir, True).static, StaticDecoder)


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(n=3, max_new_tokens=12, greedy=True, logprobs=True),
        SamplingParams(n=2, max_new_tokens=10, temperature=0.8, top_k=30, top_p=0.9, seed=5, logprobs=True),
        SamplingParams(n=4, max_new_tokens=9, temperature=1.0, seed=11, logprobs=True),
    ],
    ids=["greedy", "topk-topp", "temperature1"],
)

def test_same_tokens_and_log_probs_as_the_plain_loop(model_dir, params):
    batch = prompt_batch(model_dir, PROMPTS)
    plain = _engine(model_dir, False).generate(batch, params)
    static = _engine(model_dir, True).generate(batch, params)
    assert torch.equal(static.tensors["responses"], plain.tensors["responses"])
    assert torch.equal(static.tensors["response_mask"], plain.tensors["response_mask"])
    mask = plain.tensors["response_mask"].bool()
    diff = (static.tensors["rollout_log_probs"] - plain.tensors["rollout_log_probs"])[mask].abs().max()
    assert diff < 1e-5, float(diff)


def test_batch_bucket_rows_are_dropped(model_dir):
    """7 rows run in a bucket of 8; the extra row never reaches the output and draws no random numbers."""
    batch = prompt_batch(model_dir, ["one", "two", "three", "four", "five", "six", "seven"])
    params = SamplingParams(n=1, max_new_tokens=5, temperature=1.0, seed=3)
    eng = _engine(model_dir, True)
    out = eng.generate(batch, params)
    assert out.tensors["responses"].shape == (7, 5)
    assert [(c.bucket, c.length) for c in eng.static._caches.values()] == [(8, 128)]
    assert torch.equal(out.tensors["responses"], _engine(model_dir, False).generate(batch, params).tensors["responses"])


def test_unsupported_models_are_named():
    class Fake(torch.nn.Module):
        config = type("C", (), {"model_type": "gpt2"})()

    assert "gpt2" in unsupported_reason(Fake())
    with pytest.raises(ValueError, match="cannot run this model"):
        StaticDecoder(Fake())
    from transformers import AutoModelForCausalLM, MistralConfig, Qwen2Config

    small = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2, vocab_size=50)
    windowed = [MistralConfig(**small, sliding_window=64), Qwen2Config(**small, sliding_window=64, use_sliding_window=True)]
    full = [MistralConfig(**small, sliding_window=None), Qwen2Config(**small, sliding_window=64)]  # qwen2 names a window it does not use
    assert all(unsupported_reason(AutoModelForCausalLM.from_config(c)) == "sliding-window attention" for c in windowed)
    assert all(unsupported_reason(AutoModelForCausalLM.from_config(c)) is None for c in full)


def test_capture_failures_fall_back_to_uncompiled_then_to_eager_steps(model_dir, monkeypatch):
    """What the engine does on a GPU where torch.compile, then graph capture, fail: warn and decode all the same."""
    from rl_hf_decode import static_decode

    eng = _engine(model_dir, True)
    dec = eng.static
    dec.cuda_graph, dec.compiled = True, True  # as if on CUDA with engine_kwargs compile=true
    dec._step_fn = lambda st: dec._decode_step(st)
    tried = []

    def failing_capture(self):
        tried.append(dec.compiled)
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(static_decode._View, "capture", failing_capture)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    batch = prompt_batch(model_dir, PROMPTS)
    params = SamplingParams(n=2, max_new_tokens=6, greedy=True)
    with pytest.warns(UserWarning) as warned:
        out = eng.generate(batch, params)
    assert tried == [True, False] and not dec.cuda_graph and not dec.compiled
    assert "torch.compile" in str(warned[0].message) and "decoding without graphs" in str(warned[1].message)
    assert torch.equal(out.tensors["responses"], _engine(model_dir, False).generate(batch, params).tensors["responses"])


class TestStaticDecodeConformanceLlama(RolloutConformance):
    """The shared suite with the static decoder on (stop strings fall back to the plain loop).

    Llama only (its bigram tests check EOS handling); qwen2's biases and tied head are covered above.
    """

    logprob_atol = 1e-5
    arch = "llama"

    def make_engine(self, model_dir, config):
        rollout = attrs.evolve(config.rollout, engine_kwargs={**config.rollout.engine_kwargs, "static_decode": True})
        engine = factory(attrs.evolve(config, rollout=rollout), WorkerContext(features=FEATURES))
        assert engine.static is not None
        return engine



# ------------------------------------------------------------------ CUDA (the lead's GPU runs)
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device: CUDA graph capture")


def _cuda_engine(model_dir, **kw):
    cfg = RunConfig(model=ModelConfig(path=str(model_dir)), data=DataConfig(max_prompt_length=64), rollout=RolloutConfig(engine_kwargs=kw))
    return factory(cfg, WorkerContext(device="cuda", features=FEATURES))


@cuda
def test_cuda_graph_replays_the_eager_static_step_and_matches_the_plain_loop(model_dir):
    batch = prompt_batch(model_dir, PROMPTS)
    graph = _cuda_engine(model_dir, sleep_threshold=0)  # the default on CUDA (static cache + graph); sleep always frees
    assert graph.static is not None and graph.static.cuda_graph
    eager = _cuda_engine(model_dir, cuda_graph=False)
    plain = _cuda_engine(model_dir, static_decode=False)
    for params in (SamplingParams(n=3, max_new_tokens=20, greedy=True, logprobs=True), SamplingParams(n=2, max_new_tokens=20, temperature=0.9, top_p=0.9, seed=4, logprobs=True)):
        a, b, c = (e.generate(batch, params) for e in (graph, eager, plain))
        assert any(st.graph is not None for c in graph.static._caches.values() for st in c.views.values()), "no graph was captured"
        assert torch.equal(a.tensors["responses"], b.tensors["responses"])
        torch.testing.assert_close(a.tensors["rollout_log_probs"], b.tensors["rollout_log_probs"], atol=1e-5, rtol=1e-5)
        assert torch.equal(a.tensors["responses"], c.tensors["responses"])
        mask = c.tensors["response_mask"].bool()
        assert (a.tensors["rollout_log_probs"] - c.tensors["rollout_log_probs"])[mask].abs().max() < 1e-4
    graph.sleep()
    assert graph._offloaded and not graph.static._caches
    graph.wake_up()  # weights moved: graphs dropped and captured again
    again = graph.generate(batch, SamplingParams(n=3, max_new_tokens=20, greedy=True, logprobs=True))
    assert torch.equal(again.tensors["responses"], plain.generate(batch, SamplingParams(n=3, max_new_tokens=20, greedy=True)).tensors["responses"])


def test_packed_projections_are_views_that_a_weight_sync_writes_through(model_dir):
    """rl_hf_decode.packed_weights: q / k / v (and gate / up) become row slices of one tensor; a copy into a
    parameter lands in the packed tensor; new storage (model.to) is noticed and packed again."""
    from rl_hf_decode.packed_weights import pack_layer, still_packed

    eng = _engine(model_dir, True)
    layer = eng.model.model.layers[0]
    attn, mlp = layer.self_attn, layer.mlp
    x = torch.randn(3, attn.q_proj.in_features)
    separate = torch.cat([attn.q_proj(x), attn.k_proj(x), attn.v_proj(x)], dim=-1)
    gate_up = torch.cat([mlp.gate_proj(x), mlp.up_proj(x)], dim=-1)
    pk = pack_layer(layer)
    assert still_packed(layer, pk)
    torch.testing.assert_close(torch.nn.functional.linear(x, pk.qkv_w, pk.qkv_b), separate, atol=0, rtol=0)
    torch.testing.assert_close(torch.nn.functional.linear(x, pk.gu_w, pk.gu_b), gate_up, atol=0, rtol=0)
    # what HFRolloutEngine.load_weights does: copy into the parameter's storage
    new_k = torch.randn_like(attn.k_proj.weight)
    attn.k_proj.weight.data.copy_(new_k)
    q_rows = attn.q_proj.weight.shape[0]
    assert torch.equal(pk.qkv_w[q_rows : q_rows + new_k.shape[0]], new_k)
    eng.model.to(torch.float64)  # new storage for every parameter: the slices no longer hold
    assert not still_packed(layer, pk)


def test_a_repacked_model_drops_its_graphs_and_follows_the_new_weights(model_dir):
    eng, plain = _engine(model_dir, True), _engine(model_dir, False)
    batch = prompt_batch(model_dir, PROMPTS)
    params = SamplingParams(n=2, max_new_tokens=6, greedy=True, logprobs=True)
    eng.generate(batch, params)
    first = eng.static._packs
    assert first is not None and all(pk is not None for pk in first) and eng.static._caches
    # new weights with new storage (as a sleep / wake-up cycle gives them): repacked, caches dropped
    new = {k: v + 0.01 * torch.randn_like(v) for k, v in plain.model.named_parameters()}  # tied weights once
    for model in (plain.model, eng.model):
        for name, p in model.named_parameters():
            p.data = new[name].clone()
    eng.static._caches[99] = "stale"  # a stand-in for a cache and graphs over the old storage
    out = eng.generate(batch, params)
    assert eng.static._packs is not first and 99 not in eng.static._caches
    assert torch.equal(out.tensors["responses"], plain.generate(batch, params).tensors["responses"])


@cuda
def test_a_small_engine_keeps_its_weights_and_graphs_through_sleep(model_dir):
    """rl_core.rollout.sleep_policy: a tiny model is far below a tenth of the GPU, so sleep keeps it all."""
    eng = _cuda_engine(model_dir)
    batch = prompt_batch(model_dir, PROMPTS)
    params = SamplingParams(n=2, max_new_tokens=8, greedy=True)
    first = eng.generate(batch, params)
    caches = dict(eng.static._caches)
    eng.sleep()
    assert not eng._offloaded and next(eng.model.parameters()).is_cuda and eng.static._caches == caches
    eng.wake_up()
    assert torch.equal(eng.generate(batch, params).tensors["responses"], first.tensors["responses"])


def test_compiled_step_gives_the_plain_loop_tokens_at_two_cache_lengths(model_dir):
    """engine_kwargs compile=true (the CUDA default) on CPU, where the compiled step runs without a graph; prompts
    of two widths give two cache lengths (a dynamic dimension), and both decode as the plain loop does."""
    def cfg(**kw):
        return RunConfig(model=ModelConfig(path=str(model_dir)), data=DataConfig(max_prompt_length=400), rollout=RolloutConfig(engine_kwargs=kw))

    eng, plain = factory(cfg(static_decode=True, compile=True), WorkerContext(features=FEATURES)), factory(cfg(static_decode=False), WorkerContext(features=FEATURES))
    assert eng.static.compiled
    params = SamplingParams(n=2, max_new_tokens=8, temperature=1.0, seed=7, logprobs=True)
    long = prompt_batch(model_dir, ["x " * 70])
    assert 128 < long.tensors["input_ids"].shape[1] + 8 <= 256
    for prompts in (PROMPTS, ["x " * 70]):
        batch = prompt_batch(model_dir, prompts)
        a, b = eng.generate(batch, params), plain.generate(batch, params)
        assert torch.equal(a.tensors["responses"], b.tensors["responses"])
        mask = b.tensors["response_mask"].bool()
        assert (a.tensors["rollout_log_probs"] - b.tensors["rollout_log_probs"])[mask].abs().max() < 1e-4
    # a cache per batch bucket (3 prompts x 2 -> 8 rows, 1 x 2 -> 2 rows), each as long as its prompts need
    assert [(c.bucket, c.length) for c in eng.static._caches.values()] == [(8, 128), (2, 256)]


def test_lm_head_is_padded_to_64_rows_as_a_view_that_a_weight_sync_writes_through(model_dir):
    """rl_hf_decode.packed_weights.pad_rows: the head weight becomes the first rows of a zero-padded tensor
    (264 -> 320 rows); the logits are the same; a copy into the weight lands in it; new storage is padded again."""
    eng = _engine(model_dir, True)
    head = eng.model.get_output_embeddings()
    x = torch.randn(4, 1, head.in_features)
    before = eng.static._logits(x)  # not packed yet: the model's own head
    eng.generate(prompt_batch(model_dir, PROMPTS), SamplingParams(n=1, max_new_tokens=2, greedy=True))
    pad = eng.static._head_pad
    vocab = head.weight.shape[0]
    assert vocab % 64 and pad.shape == (-(-vocab // 64) * 64, head.in_features) and not pad[vocab:].any()
    assert head.weight.data_ptr() == pad.data_ptr()
    torch.testing.assert_close(eng.static._logits(x), before, atol=0, rtol=0)
    if eng.model.config.tie_word_embeddings:  # the embedding is the same Parameter
        assert eng.model.get_input_embeddings().weight.data_ptr() == pad.data_ptr()
    new = torch.randn_like(head.weight)
    head.weight.data.copy_(new)  # what a weight sync does
    assert torch.equal(pad[:vocab], new)
    head.weight.data = new.clone()  # new storage: noticed, padded again (and the caches dropped)
    eng.static._caches[99] = "stale"
    eng.generate(prompt_batch(model_dir, PROMPTS), SamplingParams(n=1, max_new_tokens=2, greedy=True))
    assert eng.static._head_pad is not pad and head.weight.data_ptr() == eng.static._head_pad.data_ptr() and 99 not in eng.static._caches
    eng.static.release()
    assert eng.static._head_pad is None
