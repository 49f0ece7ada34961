"""Long responses in the hf rollout's static decoder, decoded in chunks (issue #33).

A decode step attends over the cache slots the responses have reached, rounded up to
``engine_kwargs.decode_chunk``, one captured graph per such capacity
(:mod:`rl_hf_decode.static_decode`). These tests run the same code on CPU without graph capture:
chunked == unchunked (greedy and seeded sampling: the same token ids; log-probs within 1e-5), an EOS on a
chunk boundary, one compilation for every capacity, and the memory check of the cache.
"""

from __future__ import annotations

import pytest
import torch
from rl_core.backends import SamplingParams, WorkerContext
from rl_core.config.schema import DataConfig, ModelConfig, RolloutConfig, RunConfig
from rl_core.rollout.hf import factory
from rl_hf_decode.static_decode import CacheTooLarge
from rl_hf_decode.feature import FEATURE
from rl_core_testing.rollout_conformance import prompt_batch

FEATURES = {"hf_decode": FEATURE}  # the Plan's feature, as a worker hands it to its engines

pytestmark = pytest.mark.usefixtures("one_thread")

PROMPTS = ["hi", "what is 2+2?", "a longer prompt than the others"]
CHUNK = 16
R = 56  # with these prompts, slots P .. P + R - 2 span four or more capacities of 16


@pytest.fixture(scope="module")
def model_dir(tiny_model_dir):
    return tiny_model_dir("qwen2")


def _engine(model_dir, chunk: int):
    kw = {"static_decode": True, "decode_chunk": chunk}
    cfg = RunConfig(model=ModelConfig(path=str(model_dir)), data=DataConfig(max_prompt_length=64), rollout=RolloutConfig(engine_kwargs=kw))
    return factory(cfg, WorkerContext(features=FEATURES))


def _caps(engine) -> list[int]:
    return sorted(cap for cache in engine.static._caches.values() for cap in cache.views)


def _same(a, b):
    assert torch.equal(a.tensors["responses"], b.tensors["responses"])
    assert torch.equal(a.tensors["response_mask"], b.tensors["response_mask"])
    mask = a.tensors["response_mask"].bool()
    diff = (a.tensors["rollout_log_probs"] - b.tensors["rollout_log_probs"])[mask].abs().max()
    assert diff < 1e-5, float(diff)


@pytest.mark.parametrize(
    "params",
    [SamplingParams(n=2, max_new_tokens=R, greedy=True, logprobs=True), SamplingParams(n=2, max_new_tokens=R, temperature=1.0, seed=3, logprobs=True)],
    ids=["greedy", "sampled"],
)

def test_chunked_decode_equals_one_chunk(model_dir, params):
    batch = prompt_batch(model_dir, PROMPTS)
    P = batch.tensors["input_ids"].shape[1]
    chunked, whole = _engine(model_dir, CHUNK), _engine(model_dir, 0)
    a, b = chunked.generate(batch, params), whole.generate(batch, params)
    _same(a, b)
    assert int(a.tensors["response_mask"].sum(-1).max()) == R, "a response ended early: the chunks were not all reached"
    # the chunked run attended over 16, 32, ... slots as the responses grew; the unchunked one over the whole cache
    length = -(-(P + R) // 128) * 128
    want = sorted({min(length, ((P + t) // CHUNK + 1) * CHUNK) for t in range(R - 1)})
    assert _caps(chunked) == want and len(want) >= 4, (P, want)
    assert _caps(whole) == [length]


def test_an_eos_on_a_chunk_boundary_ends_its_row_there(model_dir):
    """Row ``r``'s token at ``t`` becomes the EOS, with ``P + t`` a multiple of the chunk: that row stops with
    the EOS (the step that would write it into the next chunk's first slot never runs for it), the others go on,
    and chunked still equals unchunked."""
    batch = prompt_batch(model_dir, PROMPTS)
    P = batch.tensors["input_ids"].shape[1]
    params = SamplingParams(n=2, max_new_tokens=R, temperature=1.0, seed=3, logprobs=True)
    chunked, whole = _engine(model_dir, CHUNK), _engine(model_dir, 0)
    for eng in (chunked, whole):
        eng.eos_ids = []
    free = chunked.generate(batch, params).tensors["responses"]
    picks = [(r, t) for t in range(R - 1) if (P + t) % CHUNK == 0 for r in range(len(free)) if int(free[r, t]) not in free[r, :t].tolist()]
    assert picks, "no row has a new token on a chunk boundary"
    r, t = picks[0]
    eos = int(free[r, t])
    for eng in (chunked, whole):
        eng.eos_ids = [eos]
    a, b = chunked.generate(batch, params), whole.generate(batch, params)
    _same(a, b)
    lengths = a.tensors["response_mask"].sum(-1)
    assert int(lengths[r]) == t + 1 and int(a.tensors["responses"][r, t]) == eos
    assert torch.all(a.tensors["responses"][r, t + 1 :] == chunked.pad_id)
    assert torch.all(a.tensors["rollout_log_probs"][r, t + 1 :] == 0)
    assert torch.equal(a.tensors["responses"][:, :t], free[:, :t])  # nothing before the EOS changed


def test_one_compilation_serves_every_capacity(model_dir):
    """engine_kwargs compile=true: the capacity is a dynamic dimension of the step's inputs, so the step is
    compiled once for all of them (dynamo's 'eager' backend here: it counts compilations without inductor)."""
    from torch._dynamo.testing import CompileCounter

    eng = _engine(model_dir, CHUNK)
    dec = eng.static
    counter = CompileCounter()
    dec.compiled = True  # the views mark their capacity and bucket dimensions dynamic, as on CUDA
    dec._step_fn = torch.compile(dec._decode_step, backend=counter)
    torch._dynamo.reset()
    try:
        batch = prompt_batch(model_dir, PROMPTS)
        out = eng.generate(batch, SamplingParams(n=2, max_new_tokens=R, greedy=True, logprobs=True))
        assert len(_caps(eng)) >= 4
        assert counter.frame_count == 1, counter.frame_count
        _same(out, _engine(model_dir, 0).generate(batch, SamplingParams(n=2, max_new_tokens=R, greedy=True, logprobs=True)))
    finally:
        torch._dynamo.reset()


def test_a_cache_the_device_cannot_hold_is_refused_with_the_keys_to_lower(model_dir):
    eng = _engine(model_dir, CHUNK)
    eng.static._available = lambda: 2**30 + 1000  # bytes free next to the 1 GiB margin: far too few
    with pytest.raises(CacheTooLarge, match=r"6 sequences \(a batch bucket of 8\) x 128 tokens .*rollout\.generation_batch_size.*data\.max_response_length"):
        eng.generate(prompt_batch(model_dir, PROMPTS), SamplingParams(n=2, max_new_tokens=20, greedy=True))
    eng.static._available = lambda: 2**31  # enough: allocated whole, and counted by the engine's held bytes
    eng.generate(prompt_batch(model_dir, PROMPTS), SamplingParams(n=2, max_new_tokens=20, greedy=True))
    (cache,) = eng.static._caches.values()
    assert eng.static.cache_bytes() == cache.nbytes() == type(cache).bytes_for(eng.static, 8, 128)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device: a CUDA graph per capacity")
def test_cuda_graphs_per_capacity_give_the_unchunked_tokens(model_dir):
    """On CUDA (the defaults: compiled step, CUDA graphs): one graph per capacity reached, the same tokens as one
    graph over the whole cache, log-probs to float rounding (graph vs eager: test_static_decode.py)."""
    def cuda_engine(**kw):
        cfg = RunConfig(model=ModelConfig(path=str(model_dir)), data=DataConfig(max_prompt_length=64), rollout=RolloutConfig(engine_kwargs=kw))
        return factory(cfg, WorkerContext(device="cuda", features=FEATURES))

    chunked, whole = cuda_engine(decode_chunk=CHUNK), cuda_engine(decode_chunk=0)
    batch = prompt_batch(model_dir, PROMPTS)
    for params in (SamplingParams(n=2, max_new_tokens=R, greedy=True, logprobs=True), SamplingParams(n=2, max_new_tokens=R, temperature=1.0, seed=3, logprobs=True)):
        a, b = chunked.generate(batch, params), whole.generate(batch, params)
        assert torch.equal(a.tensors["responses"], b.tensors["responses"])
        torch.testing.assert_close(a.tensors["rollout_log_probs"], b.tensors["rollout_log_probs"], atol=1e-4, rtol=1e-4)
    views = [st for cache in chunked.static._caches.values() for st in cache.views.values()]
    assert len(views) >= 4 and all(st.graph is not None for st in views), [(st.cap, st.graph) for st in views]


def test_default_chunk_is_256_and_grows_with_long_caches(model_dir):
    """Without decode_chunk the capacity grows by 256 slots (issue 48: 1024 read 1.6x the KV at the mean context of
    a 128 + 1,024-token decode), and by length / 32 (rounded up to 128) for caches over 8,192 slots, so a cache keeps
    at most ~32 graphs; a decode_chunk the user gives is taken as it is."""
    cfg = RunConfig(model=ModelConfig(path=str(model_dir)), data=DataConfig(max_prompt_length=64), rollout=RolloutConfig(engine_kwargs={"static_decode": True}))
    dec = factory(cfg, WorkerContext(features=FEATURES)).static
    assert dec.chunk == 256 and dec.auto_chunk
    # the scale workload: 128 + 1,024 tokens in a 1,152-slot cache
    assert [dec.capacity(s, 1152) for s in (128, 255, 256, 1023, 1024, 1151)] == [256, 256, 512, 1024, 1152, 1152]
    # a 32k-slot cache: steps of 1,024 slots; capacities stay at most 32
    assert dec.capacity(0, 32768) == 1024 and len({dec.capacity(s, 32768) for s in range(32768)}) == 32
    assert _engine(model_dir, 16).static.capacity(16, 32768) == 32  # the user's chunk as given
