"""rl-hf-decode in the plan: the memory estimate's static cache, and what `rlcore check` and the hf rollout say
without the package."""

from __future__ import annotations

import attrs
import pytest
from rl_core.backends import WorkerContext
from rl_core.cli.main import main
from rl_core.config.load import load_config
from rl_core.config.schema import DataConfig, ModelConfig, RolloutConfig, RunConfig
from rl_core.plan.memory import GB
from rl_memory_estimate.estimate import estimate
from rl_core.plan.resolver import resolve
from rl_core.plugins import get_registry
from rl_core.rollout.builtin import decoder_problems
from rl_core.rollout.hf import factory
from rl_core_testing.tiny_run import write_tiny_run


@pytest.fixture
def env(monkeypatch):
    yield monkeypatch
    monkeypatch.undo()
    get_registry(reload=True)


def _plan(tmp_path, **keys):
    plan, problems = resolve(load_config(write_tiny_run(tmp_path, **{"data.max_prompt_length": 24, "data.max_response_length": 8, **keys})))
    assert plan is not None, [p.render() for p in problems]
    return plan


def test_the_static_cache_counts_its_bucket_rows_and_rounded_slots(tmp_path):
    """On a GPU the static decoder allocates its KV cache whole: rows padded to a power-of-two bucket, slots rounded
    up to 128; the plain loop's cache (static_decode=false, a CPU run, or no rl-hf-decode) is rows x tokens."""
    plan = _plan(tmp_path, **{"data.train_batch_size": 4, "rollout.n": 5, "actor.ppo_mini_batch_size": 4, "model.dtype": "float32"})
    assert "hf_decode" in plan.features
    per_slot = 2 * 2 * 2 * 16 * 4  # tiny llama: layers x (K, V) x kv heads x head dim x bytes
    gpu = attrs.evolve(plan.sizes, device="cuda")
    est = estimate(plan.config, gpu, available=80 * GB, features=plan.features)
    assert est.terms["rollout KV cache"] == 32 * 128 * per_slot
    assert any("20 sequences (the static decoder's batch bucket of 32) x 128 tokens (prompt + response, rounded up to 128)" in n for n in est.notes), est.notes
    plain_cfg = attrs.evolve(plan.config, rollout=attrs.evolve(plan.config.rollout, engine_kwargs={"static_decode": False}))
    assert estimate(plain_cfg, gpu, available=80 * GB, features=plan.features).terms["rollout KV cache"] == 20 * 32 * per_slot
    assert estimate(plan.config, plan.sizes, available=80 * GB, features=plan.features).terms["rollout KV cache"] == 20 * 32 * per_slot  # CPU
    assert estimate(plan.config, gpu, available=80 * GB).terms["rollout KV cache"] == 20 * 32 * per_slot  # without the package


def test_without_the_package_a_cuda_hf_run_is_warned_and_static_decode_true_refused(tmp_path, env, capsys):
    plan = _plan(tmp_path)
    none = attrs.evolve(get_registry(), cards={**get_registry().cards, "feature": {}})
    cuda = attrs.evolve(plan.config, trainer=attrs.evolve(plan.config.trainer, device="cuda"))
    (warning,) = decoder_problems(cuda, none)
    assert warning.severity == "warning" and "pip install rl-hf-decode" in warning.fix and "faster" in warning.why
    assert decoder_problems(cuda, get_registry()) == [] and decoder_problems(plan.config, none) == []  # installed / a CPU run
    off = attrs.evolve(cuda, rollout=attrs.evolve(cuda.rollout, engine_kwargs={"static_decode": False}))
    assert decoder_problems(off, none) == []

    env.setenv("RL_CORE_BLOCK_PLUGINS", "rl-hf-decode")
    get_registry(reload=True)
    config = write_tiny_run(tmp_path / "on", **{"rollout.engine_kwargs": {"static_decode": True}})
    assert main(["check", str(config), "--skip-device-check"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "rollout.engine_kwargs.static_decode" in err and "pip install rl-hf-decode" in err, err


def test_an_engine_without_the_feature_decodes_with_its_plain_loop_or_says_what_is_missing(tiny_model_dir):
    cfg = RunConfig(model=ModelConfig(path=str(tiny_model_dir("llama"))), data=DataConfig(max_prompt_length=64),
                    rollout=RolloutConfig(engine_kwargs={"static_decode": True}))
    with pytest.raises(LookupError, match="hf_decode"):
        factory(cfg, WorkerContext())
    plain = attrs.evolve(cfg, rollout=RolloutConfig())
    assert factory(plain, WorkerContext()).static is None
