"""rl_hf_decode.sampler: the fused Triton sampler, run on a CPU by Triton's interpreter (in a child process, as
``TRITON_INTERPRET=1`` must be set before Triton is imported).

Every drawn token is checked against a float64 softmax written here: its cumulative interval must hold the row's
uniform draw, its log-prob must equal the float64 log-softmax, and no token of zero probability is ever drawn; then
against core's plain sampler (``rl_core.rollout.hf._inverse_cdf_sample``) for the same draws; then a static decode
with the kernel against one with the torch sampler (same seed: same tokens).
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton", reason="Triton is not installed (CPU-only torch on this platform): the kernel cannot be interpreted")


KERNEL_VS_FLOAT64 = """
import json
import torch
from rl_core.rollout.hf import _inverse_cdf_sample
from rl_hf_decode.sampler import BLOCK, sample

torch.manual_seed(0)
out = {"outside": 0, "lp_err": 0.0, "zero_prob": 0, "agree": 0, "compared": 0, "rows": 0, "check": None}
for vocab in (37, 5003, 2 * BLOCK):
    rows = 12
    x = torch.randn(rows, vocab) * torch.tensor([0.1, 1, 3, 10, 30, 1, 1, 1, 1, 2, 2, 2])[:, None]
    x[5, ::3] = float("-inf")  # tokens that must never be drawn
    x[6, vocab // 2:] = float("-inf")  # a row whose mass ends half way: a draw at the very top takes its last real token
    x[7, :] = -1e4
    x[7, vocab - 1] = 0.0  # all the mass on the last entry (in the last, partial block)
    u = torch.rand(rows, 1)
    u[0, 0], u[1, 0], u[6, 0] = 0.0, 1.0 - 2**-24, 1.0
    for temperature in (1.0, 0.6):
        token, lp = sample(x, u, temperature, True)
        assert token.dtype == torch.long and lp.dtype == torch.float32
        ref = torch.log_softmax(x.double() / temperature, dim=-1)
        p = ref.exp()
        cdf = p.cumsum(dim=-1)
        upper = cdf.gather(1, token[:, None])[:, 0]
        lower = upper - p.gather(1, token[:, None])[:, 0]
        draw = u[:, 0].double()
        out["outside"] += int(((draw < lower - 1e-5) | (draw > upper + 1e-5)).sum())
        out["zero_prob"] += int((p.gather(1, token[:, None])[:, 0] == 0).sum())
        out["lp_err"] = max(out["lp_err"], float((lp.double() - ref.gather(1, token[:, None])[:, 0]).abs().max()))
        # core's sampler with the same draws (a generator replayed), where no boundary is within rounding of the draw
        g = torch.Generator().manual_seed(123)
        state = g.get_state()
        u2 = torch.rand(rows, 1, generator=g)
        token2, _ = sample(x, u2, temperature, False)
        g.set_state(state)
        plain = _inverse_cdf_sample(torch.softmax(x / temperature, dim=-1), g)
        near = ((cdf - u2.double()).abs() < 1e-5).any(dim=-1)
        out["compared"] += int((~near).sum())
        out["agree"] += int(((token2 == plain) & ~near).sum())
        out["rows"] += rows
        lp_none = sample(x, u, temperature, False)[1]
        assert lp_none is None
print(json.dumps(out))
"""


def test_every_draw_lands_in_its_tokens_float64_interval(interpreted):
    out = interpreted(KERNEL_VS_FLOAT64)
    assert out["rows"] == 72
    assert out["outside"] == 0 and out["zero_prob"] == 0, out
    assert out["lp_err"] < 1e-5, out
    assert out["compared"] >= 60 and out["agree"] == out["compared"], out  # core's plain sampler draws the same tokens


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
batch = prompt_batch(model_dir, ["hi", "what is 2+2?", "a much longer prompt than the others, to pad"])
out = {}
for sampler in ("torch", "triton"):
    kw = {"static_decode": True, "decode_attention": "sdpa", "decode_sampler": sampler}
    cfg = RunConfig(model=ModelConfig(path=model_dir), data=DataConfig(max_prompt_length=64), rollout=RolloutConfig(engine_kwargs=kw))
    eng = factory(cfg, WorkerContext(features={"hf_decode": FEATURE}))
    got = eng.generate(batch, SamplingParams(n=3, max_new_tokens=12, temperature=0.8, seed=5, logprobs=True))
    out[sampler] = {"sampler": eng.static.sampler, "tokens": got.tensors["responses"].tolist(),
                    "mask": got.tensors["response_mask"].tolist(), "lp": got.tensors["rollout_log_probs"].tolist()}
print(json.dumps(out))
"""


def test_static_decode_with_the_kernel_samples_what_the_torch_sampler_samples(tiny_model_dir, interpreted):
    out = interpreted(STATIC_DECODE, str(tiny_model_dir("llama")))
    plain, kernel = out["torch"], out["triton"]
    assert (plain["sampler"], kernel["sampler"]) == ("torch", "triton")  # the kernel passed its check and ran
    assert kernel["tokens"] == plain["tokens"] and kernel["mask"] == plain["mask"]
    assert (torch.tensor(plain["lp"]) - torch.tensor(kernel["lp"])).abs().max() < 1e-5


def test_only_plain_temperature_sampling_is_fused():
    from rl_hf_decode.sampler import eligible

    plain = {"greedy": False, "temperature": 0.7, "top_k": -1, "top_p": 1.0}
    assert eligible(plain, 100)
    assert eligible({**plain, "top_k": 100}, 100) and eligible({**plain, "top_k": 0}, 100)  # no filtering
    assert not eligible({**plain, "top_k": 50}, 100)
    assert not eligible({**plain, "top_p": 0.9}, 100)
    assert not eligible({**plain, "greedy": True}, 100)
    assert not eligible(None, 100)


def test_triton_asked_for_where_it_cannot_run_is_refused_and_auto_falls_back(monkeypatch):
    from rl_hf_decode.sampler import choose

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    cpu = torch.device("cpu")
    assert choose("auto", cpu) == "torch" and choose("torch", cpu) == "torch"
    with pytest.raises(ValueError, match=r"decode_sampler=triton cannot run here: the device is cpu.*decode_sampler=auto"):
        choose("triton", cpu)
    with pytest.raises(ValueError, match=r"decode_sampler must be one of auto, triton, torch, got 'fast'"):
        choose("fast", cpu)


def test_a_kernel_failing_its_check_warns_and_the_torch_sampler_runs(tiny_model_dir, monkeypatch):
    from rl_core.backends import SamplingParams, WorkerContext
    from rl_core.config.schema import DataConfig, ModelConfig, RolloutConfig, RunConfig
    from rl_core.rollout.hf import factory
    from rl_core_testing.rollout_conformance import prompt_batch
    from rl_hf_decode import sampler
    from rl_hf_decode.feature import FEATURE

    model_dir = str(tiny_model_dir("llama"))
    batch = prompt_batch(model_dir, ["hi", "what is 2+2?"])
    params = SamplingParams(n=2, max_new_tokens=6, temperature=1.0, seed=1, logprobs=True)

    def engine(name):
        kw = {"static_decode": True, "decode_sampler": name}
        cfg = RunConfig(model=ModelConfig(path=model_dir), data=DataConfig(max_prompt_length=64), rollout=RolloutConfig(engine_kwargs=kw))
        return factory(cfg, WorkerContext(features={"hf_decode": FEATURE}))

    want = engine("torch").generate(batch, params).tensors["responses"]
    monkeypatch.setattr(sampler, "choose", lambda wanted, device: "triton")
    monkeypatch.setattr(sampler, "check", lambda vocab, device: "row 0: token 3 covers [0.1, 0.2], the draw was 0.5")
    monkeypatch.setattr(sampler, "sample", lambda *a: pytest.fail("a kernel that failed its check ran"))
    eng = engine("auto")
    with pytest.warns(UserWarning, match=r"fused Triton sampler failed its check \(row 0.*decode_sampler=torch"):
        got = eng.generate(batch, params).tensors["responses"]
    assert eng.static.sampler == "torch" and torch.equal(got, want)
