"""rl_hf_decode.decode_attention: the Triton decode attention kernel, run on a CPU by Triton's interpreter.

The kernel is compared with a float64 softmax written here (not with the decoder's own sdpa path), over left-padded
rows, grouped query heads, a head dim that is not a power of two, slot splits, and slots after the step's slot that
hold keys the kernel must not read; then a static decode with the kernel against one with sdpa (same tokens). The
interpreter is switched on by ``TRITON_INTERPRET=1`` before Triton is imported, so these run in a child process.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton", reason="Triton is not installed (CPU-only torch on this platform): the kernel cannot be interpreted")


KERNEL_VS_SOFTMAX = """
import json, math, sys
import torch
from rl_hf_decode.decode_attention import decode_attention

def reference(q, k, v, valid, slot, scale):  # float64, one row and head at a time
    rows, heads, d = q.shape
    kv = k.shape[2]
    out = torch.zeros(rows, heads, d, dtype=torch.float64)
    for r in range(rows):
        for h in range(heads):
            j = h // (heads // kv)
            slots = [s for s in range(slot + 1) if valid[s, r]]
            scores = torch.stack([(q[r, h].double() * k[s, r, j].double()).sum() * scale for s in slots])
            w = torch.softmax(scores, dim=0)
            out[r, h] = sum(w[i] * v[s, r, j].double() for i, s in enumerate(slots))
    return out

torch.manual_seed(0)
worst = {}
cases = [  # cap, bucket, rows, kv, heads, d, slot, splits
    (256, 4, 3, 2, 12, 32, 200, 1), (256, 4, 4, 2, 12, 32, 255, 3), (128, 2, 2, 1, 1, 24, 5, 2), (192, 3, 3, 2, 4, 16, 100, 4),
]
for dtype in (torch.float32, torch.bfloat16):
    for cap, bucket, rows, kv, heads, d, slot, splits in cases:
        k = torch.randn(cap, bucket, kv, d).to(dtype)
        v = torch.randn(cap, bucket, kv, d).to(dtype)
        q = torch.randn(rows, heads, d).to(dtype)
        valid = torch.rand(cap, bucket) > 0.3
        valid[: cap // 3, 0] = False  # a left-padded row
        valid[slot] = True
        valid[slot + 1:] = True  # written by no step yet in a real cache; here keys the kernel must not read
        k[slot + 1:] = 1e4
        got = decode_attention(q, k, v, valid, torch.tensor([slot]), d ** -0.5, splits)
        assert got.dtype == dtype and got.shape == q.shape
        want = reference(q, k, v, valid, slot, d ** -0.5)
        key = f"{dtype}".split(".")[-1]
        worst[key] = max(worst.get(key, 0.0), float((got.double() - want).abs().max()))
print(json.dumps(worst))
"""


def test_kernel_matches_a_float64_softmax(interpreted):
    worst = interpreted(KERNEL_VS_SOFTMAX)
    assert worst["float32"] < 1e-5, worst
    assert worst["bfloat16"] < 2e-2, worst  # bf16 inputs and output: ~3 significant digits


STATIC_DECODE = """
import json, sys
import torch
from rl_core.backends import SamplingParams, WorkerContext
from rl_core.config.schema import DataConfig, ModelConfig, RolloutConfig, RunConfig
from rl_core.rollout.hf import factory
from rl_hf_decode.feature import FEATURE
from rl_core_testing.rollout_conformance import prompt_batch

torch.set_num_threads(1)
model_dir = sys.argv[1]

def engine(attention, chunk):
    kw = {"static_decode": True, "decode_attention": attention, "decode_chunk": chunk}
    cfg = RunConfig(model=ModelConfig(path=model_dir), data=DataConfig(max_prompt_length=64), rollout=RolloutConfig(engine_kwargs=kw))
    return factory(cfg, WorkerContext(features={"hf_decode": FEATURE}))

batch = prompt_batch(model_dir, ["hi", "what is 2+2?", "a much longer prompt than the others, to pad"])
params = SamplingParams(n=2, max_new_tokens=14, temperature=1.0, seed=3, logprobs=True)
out = {}
for attention in ("sdpa", "triton"):
    eng = engine(attention, 128)
    got = eng.generate(batch, params)
    out[attention] = {"attention": eng.static.attention, "tokens": got.tensors["responses"].tolist(),
                      "mask": got.tensors["response_mask"].tolist(), "lp": got.tensors["rollout_log_probs"].tolist()}
print(json.dumps(out))
"""


@pytest.mark.parametrize("arch,sizes", [("llama", {}), ("qwen2", {"hidden": 96, "heads": 6, "kv_heads": 2})], ids=["llama", "qwen2-gqa3"])
def test_static_decode_with_the_kernel_samples_what_sdpa_samples(tiny_model_dir, arch, sizes, interpreted):
    out = interpreted(STATIC_DECODE, str(tiny_model_dir(arch, **sizes)))
    sdpa, kernel = out["sdpa"], out["triton"]
    assert (sdpa["attention"], kernel["attention"]) == ("sdpa", "triton")  # the kernel passed its own check and ran
    assert kernel["tokens"] == sdpa["tokens"] and kernel["mask"] == sdpa["mask"]
    lp_s, lp_k = torch.tensor(sdpa["lp"]), torch.tensor(kernel["lp"])
    assert (lp_s - lp_k).abs().max() < 1e-4


def test_triton_asked_for_where_it_cannot_run_is_refused_and_auto_falls_back(tiny_model_dir, monkeypatch):
    from rl_core.backends import WorkerContext
    from rl_core.config.schema import DataConfig, ModelConfig, RolloutConfig, RunConfig
    from rl_core.rollout.hf import factory
    from rl_hf_decode.feature import FEATURE

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    model_dir = str(tiny_model_dir("llama"))

    def engine(attention):
        kw = {"static_decode": True, "decode_attention": attention}
        cfg = RunConfig(model=ModelConfig(path=model_dir), data=DataConfig(max_prompt_length=64), rollout=RolloutConfig(engine_kwargs=kw))
        return factory(cfg, WorkerContext(features={"hf_decode": FEATURE}))

    assert engine("auto").static.attention == "sdpa"  # a CPU: sdpa
    with pytest.raises(ValueError, match=r"decode_attention=triton cannot run here: the device is cpu.*decode_attention=auto"):
        engine("triton")


def test_splits_fill_the_gpu_only_when_rows_are_few():
    from rl_hf_decode.decode_attention import MIN_SPLIT, splits_for

    assert splits_for(256, 2, 1152, 132) == 1  # 512 programs: enough
    assert splits_for(8, 2, 1152, 132) == 1152 // MIN_SPLIT  # 16 programs: as many splits as the capacity allows
    assert splits_for(8, 2, 16384, 132) == 17  # ceil(2 x 132 / 16)
    assert splits_for(1, 1, 128, 132) == 1  # a capacity shorter than one split
