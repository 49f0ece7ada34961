"""hf rollout specifics beyond the conformance suite: card, errors, copies, chunking."""

from __future__ import annotations

import pytest
import torch
from rl_core.backends import SamplingParams, WorkerContext
from rl_core.config.schema import DataConfig, ModelConfig, RolloutConfig, RunConfig
from rl_core.problems import UserError
from rl_core.rollout.hf import HFRolloutEngine, factory
from rl_core_testing.rollout_conformance import prompt_batch

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def model_dir(tiny_model_dir):
    return tiny_model_dir("llama")


def _config(model_dir, **rollout):
    return RunConfig(model=ModelConfig(path=str(model_dir)), data=DataConfig(max_prompt_length=32), rollout=RolloutConfig(**rollout))


def test_card_is_registered_and_truthful():
    from rl_core.plugins import get_registry

    card = get_registry(reload=True).get("rollout", "hf")
    assert card.provider.distribution == "rl-core"
    assert card.devices == {"cpu", "cuda"} and card.max_tp == 1
    assert card.weight_formats == {"hf"} and card.logprobs
    assert card.load() is factory


def test_missing_model_path_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError) as err:
        factory(_config(tmp_path / "absent"), WorkerContext())
    assert str(tmp_path / "absent") in str(err.value) and "rlcore model smollm2" in str(err.value)


def test_load_weights_copies_by_default(model_dir):
    engine = factory(_config(model_dir), WorkerContext())
    src = {n: p.detach().clone() + 1.0 for n, p in engine.model.named_parameters()}
    engine.load_weights(src.items())
    for name, p in engine.model.named_parameters():
        assert torch.equal(p, src[name]) and p.data_ptr() != src[name].data_ptr()


def test_share_weights_adopts_same_device_tensors(model_dir):
    engine = factory(_config(model_dir, engine_kwargs={"share_weights": True}), WorkerContext())
    src = {n: p.detach().clone() * 2 for n, p in engine.model.named_parameters()}
    engine.load_weights(src.items())
    for name, p in engine.model.named_parameters():
        assert p.data_ptr() == src[name].data_ptr(), name  # zero-copy
    half = {n: t.to(torch.bfloat16) for n, t in src.items()}
    engine.load_weights(half.items())  # another dtype: copied and converted
    for name, p in engine.model.named_parameters():
        assert p.dtype == torch.float32 and p.data_ptr() == src[name].data_ptr()


def test_missing_weights_are_named(model_dir):
    engine = factory(_config(model_dir), WorkerContext())
    some = [(n, p.detach()) for n, p in engine.model.named_parameters() if "layers.1." not in n]
    with pytest.raises(ValueError, match=r"not provided: model\.layers\.1\."):
        engine.load_weights(some)


def test_chunks_follow_generation_batch_size(model_dir, monkeypatch):
    engine = factory(_config(model_dir, generation_batch_size=4), WorkerContext())
    sizes = []
    real = HFRolloutEngine._decode

    def spy(self, ids, *args, **kwargs):
        sizes.append(ids.shape[0])
        return real(self, ids, *args, **kwargs)

    monkeypatch.setattr(HFRolloutEngine, "_decode", spy)
    out = engine.generate(prompt_batch(model_dir), SamplingParams(n=2, max_new_tokens=3, greedy=True))
    assert sizes == [2, 2] and len(out) == 8  # 4 prompts x n=2, 4 sequences (2 prompts, each decoded twice) per call


def test_bad_sampling_params(model_dir):
    engine = factory(_config(model_dir), WorkerContext())
    with pytest.raises(ValueError, match="n >= 1"):
        engine.generate(prompt_batch(model_dir), SamplingParams(n=0))
    with pytest.raises(ValueError, match="input_ids"):
        engine.generate(prompt_batch(model_dir).select("attention_mask"), SamplingParams())
    batch = prompt_batch(model_dir)
    batch.tensors["attention_mask"][2] = 0
    with pytest.raises(UserError, match="prompt 2 of the batch is empty"):
        engine.generate(batch, SamplingParams())


def test_seeded_sampling_leaves_the_global_rng_alone(model_dir):
    engine = factory(_config(model_dir), WorkerContext())
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    engine.generate(prompt_batch(model_dir), SamplingParams(n=2, max_new_tokens=4, seed=9))
    assert torch.equal(torch.rand(3), expected)


def test_prompt_prefilled_once_per_group_gives_the_same_responses(model_dir):
    """n samples of a prompt share one prefill; greedy output equals n separate copies of the prompt."""
    engine = factory(_config(model_dir), WorkerContext())
    batch = prompt_batch(model_dir)
    prefill_rows = []
    handle = engine.model.register_forward_pre_hook(lambda mod, args, kwargs: prefill_rows.append(kwargs["input_ids"].shape), with_kwargs=True)
    try:
        grouped = engine.generate(batch, SamplingParams(n=3, max_new_tokens=4, greedy=True, logprobs=True))
    finally:
        handle.remove()
    assert prefill_rows[0] == batch.tensors["input_ids"].shape  # one prefill row per prompt
    assert all(shape[0] == 3 * len(batch) and shape[1] == 1 for shape in prefill_rows[1:])
    repeated = batch.tensors["input_ids"].repeat_interleave(3, 0), batch.tensors["attention_mask"].repeat_interleave(3, 0)
    from rl_core.batch import Batch

    copies = engine.generate(Batch({"input_ids": repeated[0], "attention_mask": repeated[1]}), SamplingParams(n=1, max_new_tokens=4, greedy=True, logprobs=True))
    assert torch.equal(grouped.tensors["responses"], copies.tensors["responses"])
    torch.testing.assert_close(grouped.tensors["rollout_log_probs"], copies.tensors["rollout_log_probs"], rtol=0, atol=1e-5)


def test_inverse_cdf_sampler_follows_the_distribution():
    from rl_core.rollout.hf import _inverse_cdf_sample

    probs = torch.tensor([[0.5, 0.0, 0.2, 0.3, 0.0], [0.0, 0.0, 0.0, 0.0, 1.0]])
    g = torch.Generator().manual_seed(0)
    draws = torch.stack([_inverse_cdf_sample(probs, g) for _ in range(20000)])
    freq = torch.bincount(draws[:, 0], minlength=5).float() / len(draws)
    assert freq[1] == 0 and freq[4] == 0  # zero-probability tokens never come up
    torch.testing.assert_close(freq, probs[0], rtol=0, atol=0.015)
    assert (draws[:, 1] == 4).all()
    again = torch.stack([_inverse_cdf_sample(probs, torch.Generator().manual_seed(0)) for _ in range(3)])
    first = torch.stack([_inverse_cdf_sample(probs, torch.Generator().manual_seed(0)) for _ in range(3)])
    assert torch.equal(again, first)
