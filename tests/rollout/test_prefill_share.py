"""One prefill per GRPO group in the hf rollout (rl_core.rollout.hf.share_prefill): the n samples of a prompt share
its prefill, on the plain loop and on rl-hf-decode's static decoder (run on CPU without graphs). Sharing changes no token
(float32, same seed), and the prompt tokens prefilled are prompts x prompt length, not x n: counted here by a hook
on the model's embedding (every forward over more than one position is a prefill), independently of the engine's
own counter."""

from __future__ import annotations

import pytest
import torch
from rl_core.backends import SamplingParams, WorkerContext
from rl_core.config.schema import DataConfig, ModelConfig, RolloutConfig, RunConfig
from rl_core.plan.features import load_features
from rl_core.plugins import get_registry
from rl_core.rollout.hf import PREFILL_TOKENS, factory, share_prefill
from rl_core_testing.rollout_conformance import prompt_batch

pytestmark = pytest.mark.usefixtures("one_thread")

PROMPTS = ["hi", "what is 2+2?", "a much longer prompt than the others, to pad it"]
N = 4
FEATURES = load_features(get_registry(), [])  # the installed features, as a plan's worker hands them to its engines


@pytest.fixture(scope="module")
def model_dir(tiny_model_dir):
    return tiny_model_dir("qwen2")


def _engine(model_dir, *, static: bool, share: bool):
    cfg = RunConfig(model=ModelConfig(path=str(model_dir), dtype="float32"), data=DataConfig(max_prompt_length=64),
                    rollout=RolloutConfig(engine_kwargs={"static_decode": static, "share_prefill": share}))
    return factory(cfg, WorkerContext(features=FEATURES))


def _generate_counting(engine, batch, params):
    """The output and the prompt rows x positions the model's prefills ran over (hooked on the embedding)."""
    seen: list[tuple[int, int]] = []
    embed = engine.model.get_input_embeddings()
    handle = embed.register_forward_hook(lambda mod, args, out: seen.append(tuple(args[0].shape)) if args[0].shape[1] > 1 else None)
    try:
        out = engine.generate(batch, params)
    finally:
        handle.remove()
    return out, seen


@pytest.mark.parametrize("static", [False, True], ids=["plain", "static"])
@pytest.mark.parametrize(
    "params",
    [SamplingParams(n=N, max_new_tokens=10, temperature=1.0, seed=7, logprobs=True),
     SamplingParams(n=N, max_new_tokens=8, temperature=0.7, top_k=20, top_p=0.9, seed=3, logprobs=True)],
    ids=["t1", "topk-topp"],
)
def test_sharing_changes_no_token_and_prefills_each_prompt_once(model_dir, static, params):
    if static and "hf_decode" not in FEATURES:
        pytest.skip("the static decoder is rl-hf-decode's (plugins/hf_decode): not installed")
    batch = prompt_batch(model_dir, PROMPTS)
    mask = batch.tensors["attention_mask"]
    P = mask.shape[1]
    shared, seen_on = _generate_counting(_engine(model_dir, static=static, share=True), batch, params)
    each, seen_off = _generate_counting(_engine(model_dir, static=static, share=False), batch, params)

    assert torch.equal(shared.tensors["responses"], each.tensors["responses"])
    assert torch.equal(shared.tensors["response_mask"], each.tensors["response_mask"])
    valid = shared.tensors["response_mask"].bool()
    assert (shared.tensors["rollout_log_probs"] - each.tensors["rollout_log_probs"])[valid].abs().max() < 1e-5

    # the model's prefills: one over the 3 prompt rows with sharing, one over 3 x n rows without
    assert seen_on == [(len(PROMPTS), P)]
    assert seen_off == [(len(PROMPTS) * N, P)]
    # the engine's count: the prompts' real (unpadded) tokens, once per prompt / once per sample
    prompt_tokens = int(mask.sum())
    assert prompt_tokens < len(PROMPTS) * P  # the prompts have different lengths: padding is not counted
    assert shared.meta[PREFILL_TOKENS] == prompt_tokens
    assert each.meta[PREFILL_TOKENS] == prompt_tokens * N


def test_share_prefill_must_be_a_bool():
    assert share_prefill({}) is True
    assert share_prefill({"share_prefill": False}) is False
    with pytest.raises(ValueError, match="share_prefill must be true or false"):
        share_prefill({"share_prefill": "no"})
