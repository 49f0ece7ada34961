"""rl_train_megatron.sdpa: the engine's core attention (torch's scaled_dot_product_attention in megatron-core's
DotProductAttention slot) gives megatron-core's own unfused DotProductAttention's outputs and gradients: grouped-query
heads, left / right padding, rows whose keys are all padding, the causal (mask None) path; and the engine's layers use it."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("megatron.core", reason="needs megatron-core (pip install megatron-core==0.16.1)")

from rl_train_megatron import parallel  # noqa: E402
from rl_train_megatron.model import attention_mask  # noqa: E402
from rl_train_megatron.sdpa import SDPAttention, allowed_keys  # noqa: E402

pytestmark = pytest.mark.megatron


@pytest.fixture(scope="module")
def config():
    from megatron.core.transformer.transformer_config import TransformerConfig
    from rl_train_megatron.options import FIXED

    parallel.acquire(1, 1, torch.device("cpu"))
    try:
        yield TransformerConfig(num_layers=1, hidden_size=48, num_attention_heads=6, num_query_groups=2, kv_channels=8, ffn_hidden_size=64,
                                params_dtype=torch.float32, pipeline_dtype=torch.float32, tensor_model_parallel_size=1, **FIXED)
    finally:
        parallel.release()


def _both(config):
    from megatron.core.transformer.dot_product_attention import DotProductAttention
    from megatron.core.transformer.enums import AttnMaskType

    kw = dict(layer_number=1, attn_mask_type=AttnMaskType.padding, attention_type="self")
    return DotProductAttention(config, **kw), SDPAttention(config, **kw)


def _qkv(s=7, b=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(s, b, 6, 8, generator=g, requires_grad=True)
    k = torch.randn(s, b, 2, 8, generator=g, requires_grad=True)
    v = torch.randn(s, b, 2, 8, generator=g, requires_grad=True)
    return q, k, v


def _run(module, q, k, v, mask, out_grad):
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    out = module(q, k, v, mask)
    out.backward(out_grad)
    return out.detach(), q.grad, k.grad, v.grad


def test_padded_rows_match_megatron_cores_unfused_attention(config):
    ref, fused = _both(config)
    q, k, v = _qkv()
    pad = torch.ones(3, 7, dtype=torch.long)
    pad[0, :3] = 0  # a left-padded prompt: the first 3 query rows see no key (all masked)
    pad[1, -2:] = 0  # a right-padded response
    mask = attention_mask(pad)
    allowed, empty = allowed_keys(mask)
    assert bool(allowed.any(-1).all()) and int(empty.sum()) == 3  # every row attends to something; 3 rows had no key
    g = torch.randn(7, 3, 48, generator=torch.Generator().manual_seed(1))
    want, got = _run(ref, q, k, v, mask, g), _run(fused, q, k, v, mask, g)
    for w, h in zip(want, got):
        torch.testing.assert_close(h, w, rtol=1e-5, atol=1e-5)


def test_no_padding_runs_the_causal_path_with_the_causal_masks_numbers(config):
    ref, fused = _both(config)
    q, k, v = _qkv(seed=2)
    full = torch.ones(3, 7, dtype=torch.long)
    assert attention_mask(full) is None  # no padding: the causal kernel (flash attention on GPUs)
    causal = torch.ones(7, 7, dtype=torch.bool).triu(1)[None, None].expand(3, 1, 7, 7)
    g = torch.randn(7, 3, 48, generator=torch.Generator().manual_seed(3))
    want, got = _run(ref, q, k, v, causal, g), _run(fused, q, k, v, None, g)
    for w, h in zip(want, got):
        torch.testing.assert_close(h, w, rtol=1e-5, atol=1e-5)


def test_the_engines_layers_use_it(tmp_path):
    from rl_core_testing.tiny_model import make_tiny_model_dir
    from rl_train_megatron.model import build_model, model_shape
    from transformers import AutoConfig

    path = make_tiny_model_dir(tmp_path / "m", "qwen2", layers=2)
    hf = AutoConfig.from_pretrained(str(path))
    parallel.acquire(1, 1, torch.device("cpu"))
    try:
        model = build_model(model_shape(hf), hf, 1, 1)
    finally:
        parallel.release()
    kinds = {type(layer.self_attention.core_attention) for layer in model.decoder.layers}
    assert kinds == {SDPAttention}


def _chunked_run(rank: int, world: int, config, step) -> dict:
    from rl_core.backends import WorkerContext
    from rl_train_megatron.engine import build_engine

    actor = build_engine("actor", config, WorkerContext(rank=rank, world_size=world, seed=0))
    out = {"init": {n: t.detach().clone() for n, t in actor.named_weights()}}
    out.update(log_probs=actor.compute_log_prob(step, temperature=0.7, with_entropy=True), metrics=actor.update(step))
    out["weights"] = {n: t.detach().clone() for n, t in actor.named_weights()}
    actor.shutdown()
    return out


def test_chunked_lm_head_gives_the_whole_vocabulary_heads_numbers(tmp_path):
    """model.logprob_chunk_size (the fsdp backend's chunked LM head, rl_core.logprobs; on GPUs by default with TP 1) gives
    the log-probs, entropy, loss, gradient norm and updated weights of the whole-response path (chunk 0)."""
    import attrs
    from rl_core_testing.adam_weights import assert_adam_weights_close
    from rl_core_testing.distributed import run_distributed
    from rl_core_testing.tiny_model import make_tiny_model_dir
    from rl_core_testing.train_conformance import default_config, make_step_batch

    path = make_tiny_model_dir(tmp_path / "m", "qwen2", seed=0)
    step = make_step_batch(path)
    cfg = default_config(path)
    cfg = attrs.evolve(cfg, train=attrs.evolve(cfg.train, name="megatron"))
    runs = {}
    for chunk in (0, 5):  # 5 tokens per chunk: several chunks per micro-batch, the last one short
        c = attrs.evolve(cfg, model=attrs.evolve(cfg.model, logprob_chunk_size=chunk))
        runs[chunk] = run_distributed(_chunked_run, 1, c, step, timeout=600)[0]
    whole, chunked = runs[0], runs[5]
    for key in ("log_probs", "entropy"):
        torch.testing.assert_close(chunked["log_probs"][key], whole["log_probs"][key], rtol=1e-5, atol=1e-5)
    for key, value in whole["metrics"].items():
        assert chunked["metrics"][key] == pytest.approx(value, rel=1e-4, abs=1e-6), key
    for name, w in whole["weights"].items():  # (AdamW's first step: rounding-level gradient differences on tiny entries move them)
        assert_adam_weights_close(chunked["weights"][name], w, whole["init"][name], name=name, atol=1e-6, rtol=1e-5)
