"""The real SGLang engine (CPU, fp32) against rl-core's rollout conformance suite.

SGLang takes tens of seconds to start on CPU, so the module starts **one**
engine and every adapter of the suite shares it (``SGLangRollout(...,
client=...)``); tests that change weights load the original ones back
afterwards. Plus what only this backend has: bucketed weight sync, the
engine's context length, reporting of empty generations, an engine that
fails to start.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

try:
    import sglang  # noqa: F401
except Exception as exc:  # noqa: BLE001 - "installed but broken" skips with its message too
    pytest.skip(
        "needs the SGLang engine (pip install 'rl-rollout-sglang[gpu]' on GPU; on CPU run "
        f"plugins/rollout_sglang/scripts/install_cpu_engine.sh in a separate venv): {type(exc).__name__}: {exc}",
        allow_module_level=True,
    )

from rl_core.backends import SamplingParams, WorkerContext  # noqa: E402
from rl_core_testing.rollout_conformance import (  # noqa: E402
    RolloutConformance,
    prompt_batch,
    reference_log_probs,
    reference_model,
)
from rl_core_testing.tiny_model import make_tiny_model_dir  # noqa: E402
try:  # the multi-turn case is rl-agent's (plugins/agent); without it installed, it is not collected
    from rl_agent.conformance import MultiTurnConformance  # noqa: E402
except ImportError:  # pragma: no cover
    MultiTurnConformance = object  # type: ignore[misc,assignment]
from rl_rollout_sglang.clients import EngineStartError, InProcessClient  # noqa: E402
from rl_rollout_sglang.convert import EMPTY_META_KEY  # noqa: E402
from rl_rollout_sglang.engine import SGLangRollout  # noqa: E402

pytestmark = pytest.mark.sglang

ARCH, HIDDEN, HEADS, KV_HEADS = "llama", 64, 4, 2


def _config(model_dir, **rollout):
    return TestSGLangRollout().make_config(model_dir, **rollout)


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """One tiny model and one SGLang engine for the whole module."""
    model_dir = make_tiny_model_dir(tmp_path_factory.mktemp("sglang_model"), ARCH, hidden=HIDDEN, heads=HEADS, kv_heads=KV_HEADS, seed=0)
    adapter = SGLangRollout(_config(model_dir), WorkerContext())
    yield model_dir, adapter.client
    adapter.shutdown()


class TestSGLangRollout(RolloutConformance, MultiTurnConformance):
    """fp32 SGLang on CPU: log-probs of sampled tokens within 1e-3 of a transformers forward pass."""

    logprob_atol = 1e-3
    supports_multi_turn = True
    torch_threads = None  # the engine computes in its own processes
    arch, hidden, heads, kv_heads = ARCH, HIDDEN, HEADS, KV_HEADS

    @pytest.fixture(scope="class")
    def model_dir(self, shared):
        return shared[0]

    @pytest.fixture(scope="class", autouse=True)
    def _client(self, shared):
        type(self).client = shared[1]
        yield
        type(self).client = None

    def make_engine(self, model_dir, config, context=None):
        return SGLangRollout(config, context or WorkerContext(), client=self.client)

    @pytest.fixture
    def fresh_engine(self, model_dir):
        """The shared engine; the original weights are loaded back after the test."""
        from safetensors.torch import load_file

        eng = self.make_engine(model_dir, self.make_config(model_dir))
        yield eng
        eng.load_weights(load_file(str(Path(model_dir) / "model.safetensors")).items())

    # ------------------------------------------------------ SGLang specifics
    def test_bucketed_sync_equals_one_bucket(self, fresh_engine, model_dir, prompts):
        """Tiny buckets (many calls) and one bucket load the same weights, and follow the new weights."""
        from safetensors.torch import load_file

        base = load_file(str(Path(model_dir) / "model.safetensors"))
        gen = torch.Generator().manual_seed(3)
        new = {k: v + 0.05 * torch.randn(v.shape, generator=gen) for k, v in base.items()}
        params = SamplingParams(n=2, max_new_tokens=8, temperature=0.9, logprobs=True, seed=4)
        outs = []
        for bucket_mb in (0.01, 1024):
            eng = self.make_engine(model_dir, self.make_config(model_dir, engine_kwargs={"weight_sync_bucket_mb": bucket_mb}))
            fresh_engine.load_weights(iter(base.items()))  # start from the original weights each time
            eng.load_weights(iter(new.items()))
            outs.append(eng.generate(prompts, params))
        a, b = outs
        assert torch.equal(a.tensors["responses"], b.tensors["responses"])
        torch.testing.assert_close(a.tensors["rollout_log_probs"], b.tensors["rollout_log_probs"], atol=1e-6, rtol=0)
        ref = reference_log_probs(reference_model(model_dir, new), a, 0.9)
        rm = a.tensors["response_mask"].bool()
        torch.testing.assert_close(a.tensors["rollout_log_probs"][rm], ref[rm], atol=self.logprob_atol, rtol=0)

    def test_sync_does_not_change_the_callers_tensors(self, fresh_engine, model_dir):
        from safetensors.torch import load_file

        weights = load_file(str(Path(model_dir) / "model.safetensors"))
        before = {k: v.clone() for k, v in weights.items()}
        fresh_engine.load_weights(weights.items())
        for k, v in weights.items():
            assert torch.equal(v, before[k]), k
            assert not v.is_shared(), f"{k} was moved into shared memory"

    def test_prompt_longer_than_engine_context(self, model_dir):
        eng = self.make_engine(model_dir, self.make_config(model_dir, engine_kwargs={"context_length": 16}))
        with pytest.raises(ValueError) as err:
            eng.generate(prompt_batch(model_dir, ("ok", "y" * 14)), SamplingParams(n=1, max_new_tokens=4))
        assert "prompt 1 of the batch has 14 tokens; with max_new_tokens=4 it needs 18 positions, more than the SGLang engine's context length 16" in str(err.value)

    def test_empty_generation_is_reported(self, engine, prompts, caplog, monkeypatch):
        """SGLang does not produce zero-token outputs on its own; a doctored answer checks the reporting path."""
        real = engine.client.generate

        def generate(input_ids, sampling, return_logprob):
            outs = real(input_ids, sampling, return_logprob)
            outs[0] = {"output_ids": [], "meta_info": {"output_token_logprobs": [], "finish_reason": {"type": "abort"}}}
            return outs

        monkeypatch.setattr(engine.client, "generate", generate)
        with caplog.at_level(logging.WARNING, logger="rl_core.rollout.samples"):
            out = engine.generate(prompts, SamplingParams(n=2, max_new_tokens=4, logprobs=True, seed=0))
        assert out.meta[EMPTY_META_KEY] == 1
        assert out.tensors["response_mask"][0].sum() == 0 and out.tensors["response_mask"][1:].sum(-1).min() >= 1
        assert "row 0 (prompt 0, finish_reason='abort')" in caplog.text

    def test_n_samples_of_a_prompt_get_their_own_seeds(self, engine, model_dir):
        """Sample j of prompt i is seeded seed + i*n + j: n=2 with seed s equals n=1 with seeds s and s+1."""
        one = prompt_batch(model_dir, ("What is 2+3?",))
        two = engine.generate(one, SamplingParams(n=2, max_new_tokens=8, temperature=1.0, seed=50)).tensors["responses"]
        first = engine.generate(one, SamplingParams(n=1, max_new_tokens=8, temperature=1.0, seed=50)).tensors["responses"]
        second = engine.generate(one, SamplingParams(n=1, max_new_tokens=8, temperature=1.0, seed=51)).tensors["responses"]
        assert torch.equal(two[0], first[0]) and torch.equal(two[1], second[0])


def test_engine_start_failure_names_the_error_and_the_arguments(tmp_path):
    (tmp_path / "config.json").write_text('{"architectures": ["NoSuchModelForCausalLM"], "model_type": "nosuch"}')
    with pytest.raises(EngineStartError) as err:
        InProcessClient({"model_path": str(tmp_path), "device": "cpu", "dtype": "float32", "skip_tokenizer_init": True, "mem_fraction_static": 0.05})
    msg = str(err.value)
    assert "the SGLang engine failed to start" in msg
    assert f"model_path={str(tmp_path)!r}" in msg and "mem_fraction_static=0.05" in msg
    assert err.value.__cause__ is not None


@pytest.mark.slow
def test_tensor_parallel_2_on_cpu(shared):
    """One rank, SGLang TP 2 (two scheduler processes, one core each): log-probs still match transformers."""
    model_dir = shared[0]
    adapter = SGLangRollout(_config(model_dir, tensor_model_parallel_size=2), WorkerContext())
    try:
        out = adapter.generate(prompt_batch(model_dir), SamplingParams(n=2, max_new_tokens=8, temperature=1.0, logprobs=True, seed=5))
    finally:
        adapter.shutdown()
    ref = reference_log_probs(reference_model(model_dir), out, 1.0)
    rm = out.tensors["response_mask"].bool()
    torch.testing.assert_close(out.tensors["rollout_log_probs"][rm], ref[rm], atol=1e-3, rtol=0)


def test_every_sync_is_verified_and_a_stale_engine_stops_the_run(shared):
    """rl_core.weight_sync_check with SGLang: the engine's elements (q/k/v, gate/up as rows of its fused weights) read
    back through its get_weights_by_name call equal what was sent; an engine that keeps its old weights fires."""
    from rl_core.weight_sync_check import StaleWeightsError, load_verified
    from safetensors.torch import load_file

    model_dir, client = shared
    eng = SGLangRollout(_config(model_dir), WorkerContext(), client=client)
    base = load_file(str(Path(model_dir) / "model.safetensors"))
    gen = torch.Generator().manual_seed(5)
    new = {k: v + 0.01 * torch.randn(v.shape, generator=gen) for k, v in base.items()}
    try:
        assert load_verified(eng, iter(new.items()), None, engine_name="sglang", version=1) == len(new)

        class Stale:  # an engine handed new weights that keeps the old ones
            def load_weights(self, weights):
                for _ in weights:
                    pass

            sample_weights = eng.sample_weights

        with pytest.raises(StaleWeightsError, match=rf"weight version 2: the rollout engine 'sglang' kept stale weights: {len(base)} of {len(base)} tensors differ"):
            load_verified(Stale(), iter(base.items()), None, engine_name="sglang", version=2)
    finally:
        eng.load_weights(iter(base.items()))


def test_lora_actor_reaches_sglang_merged_and_verified(shared):
    """LoRA on the fsdp actor, SGLang rollout with the merged fallback (rollout.lora_sync=merged; the adapter path:
    test_sglang_e2e.py): after each of two updates the merged weights are synced, verified in the engine
    and against the trainer's own W + scale*B@A, and SGLang's log-probs of its own samples equal the actor's."""
    pytest.importorskip("peft", reason="LoRA needs peft (pip install rl-lora; peft==0.21.2 in the engine's venv)")
    rl_train_fsdp = pytest.importorskip("rl_train_fsdp.engine", reason="needs the rl-train-fsdp plugin")
    import attrs
    from rl_core.weight_sync_check import load_verified
    from rl_core_testing.train_conformance import default_config, make_step_batch
    from safetensors.torch import load_file

    model_dir, client = shared
    cfg = default_config(model_dir)
    cfg = attrs.evolve(cfg, model=attrs.evolve(cfg.model, lora_rank=4, lora_alpha=8.0),
                       actor=attrs.evolve(cfg.actor, optim=attrs.evolve(cfg.actor.optim, lr=1e-2, lr_warmup_steps=0)))
    actor = rl_train_fsdp.build_engine("actor", cfg, WorkerContext())
    eng = SGLangRollout(_config(model_dir), WorkerContext(), client=client)
    step = make_step_batch(model_dir)
    params = SamplingParams(n=2, max_new_tokens=6, temperature=1.0, logprobs=True, seed=11)
    try:
        for version in (1, 2):
            actor.update(step)
            assert load_verified(eng, actor.named_weights(), actor.sample_weights, engine_name="sglang", version=version) > 0
            out = eng.generate(prompt_batch(model_dir), params)
            mask = out.tensors["response_mask"].bool()
            mine = actor.compute_log_prob(out, temperature=1.0)["log_probs"]
            base = actor.compute_log_prob(out, temperature=1.0, reference=True)["log_probs"]
            gap = (mine[mask] - out.tensors["rollout_log_probs"][mask]).abs().max().item()
            assert gap < 1e-3, (version, gap)
            assert (mine[mask] - base[mask]).abs().max().item() > 10 * max(gap, 1e-4)  # the adapters matter
    finally:
        eng.load_weights(load_file(str(Path(model_dir) / "model.safetensors")).items())
