"""Around the rollout-vs-trainer gap (issue 51): the steps that ask for log-probs (rl_core.rollout.log_prob_decision),
seeded sampling, trainer.deterministic (rl_core.util.determinism), and rollout.exact without the rl-exact package (an
`rlcore check` problem naming it). Exact mode itself: plugins/exact/tests."""

from __future__ import annotations

import os
from types import SimpleNamespace

import attrs
import pytest
import torch
from rl_core.backends import SamplingParams, WorkerContext
from rl_core.cli.main import main
from rl_core.config.load import load_config
from rl_core.config.schema import DataConfig, ModelConfig, RolloutConfig, RunConfig
from rl_core.plan.resolver import resolve
from rl_core.plugins import get_registry
from rl_core.rollout import log_prob_decision
from rl_core.rollout.builtin import HF_ROLLOUT
from rl_core.trainer.loop import Trainer
from rl_core.rollout.hf import HFRolloutEngine
from rl_core.trainer.tracking import key_metrics
from rl_core.util.determinism import apply_determinism
from rl_core_testing.rollout_conformance import prompt_batch
from rl_core_testing.tiny_run import write_tiny_run

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def model_dir(tiny_model_dir):
    return tiny_model_dir("llama")


def _engine(model_dir, **rollout):
    cfg = RunConfig(model=ModelConfig(path=str(model_dir), dtype="bfloat16"), data=DataConfig(max_prompt_length=32), rollout=RolloutConfig(**rollout))
    return HFRolloutEngine(cfg, WorkerContext())


def test_hf_sampling_is_seeded_not_the_global_rng(model_dir):
    """A test that fails if the rollout's sampling read an unseeded (global) RNG: same seed, disturbed global state."""
    eng = _engine(model_dir)
    params = SamplingParams(n=2, temperature=1.0, max_new_tokens=6, seed=11, logprobs=True)
    batch = prompt_batch(model_dir)
    torch.manual_seed(0)
    a = eng.generate(batch, params)
    torch.manual_seed(12345)
    torch.rand(1000)
    b = eng.generate(batch, params)
    assert torch.equal(a["responses"], b["responses"]) and torch.equal(a["rollout_log_probs"], b["rollout_log_probs"])
    c = eng.generate(batch, SamplingParams(n=2, temperature=1.0, max_new_tokens=6, seed=12, logprobs=True))
    assert not torch.equal(a["responses"], c["responses"])  # the seed is what decides


def test_the_steps_that_ask_the_engine_for_log_probs():
    """The loop's SamplingParams: every step when on, none when off, steps 1, 1 + GAP_EVERY, ... when auto found no
    user (on every backend, hf's included); never for validation (greedy) nor from a backend whose card declares no log-probs."""
    def asked(value, card=HF_ROLLOUT, steps=range(1, 2 * log_prob_decision.GAP_EVERY + 2)):
        cfg = load_config(overrides=[f"rollout.calculate_log_probs={value}"])
        trainer = SimpleNamespace(config=cfg, stack=SimpleNamespace(rollout=card))
        return [s for s in steps if Trainer.sampling(trainer, step=s).logprobs], Trainer.sampling(trainer, greedy=True, step=1).logprobs

    assert asked("null") == ([1, 1 + log_prob_decision.GAP_EVERY, 1 + 2 * log_prob_decision.GAP_EVERY], False)
    assert asked("true") == (list(range(1, 2 * log_prob_decision.GAP_EVERY + 2)), False)
    assert asked("false") == ([], False)
    assert asked("true", attrs.evolve(HF_ROLLOUT, logprobs=False)) == ([], False)


def test_log_probs_on_the_console_line():
    shown = key_metrics({"rollout_corr/log_prob_abs_diff_max": 0.25, "rollout_corr/kl": 0.5, "rollout_corr/log_prob_abs_diff_mean": 0.1})
    assert shown == {"dlogp": 0.25}  # the gap; the mismatch's KL estimate is not the policy's kl


def test_apply_determinism(monkeypatch):
    was = torch.are_deterministic_algorithms_enabled()
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    try:
        assert apply_determinism(RunConfig()) is False and "CUBLAS_WORKSPACE_CONFIG" not in os.environ
        assert apply_determinism(load_config(overrides=["trainer.deterministic=true"])) is True
        assert torch.are_deterministic_algorithms_enabled() and os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
        assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
    finally:
        torch.use_deterministic_algorithms(was)
        torch.backends.cudnn.deterministic = False


def test_exact_without_its_package_is_a_check_problem(tmp_path):
    """rollout.exact=true with no ``exact`` LogProbForwardCard installed: one problem on rollout.exact naming rl-exact."""
    cfg = load_config(write_tiny_run(tmp_path, **{"rollout.exact": True}))
    base = get_registry()
    without = attrs.evolve(base, cards={**base.cards, "log_prob_forward": {}}, skipped=[], errors=[])
    plan, problems = resolve(cfg, without)
    assert plan is None
    (p,) = [p for p in problems if p.key == "rollout.exact"]
    assert "no log_prob_forward named 'exact' is installed" in p.what and "pip install rl-exact" in p.what + p.fix
    plan, problems = resolve(load_config(write_tiny_run(tmp_path / "off")), without)  # off: the package is not needed
    assert plan is not None and plan.log_prob_forward is None, [p.render() for p in problems]


@pytest.fixture
def env(monkeypatch):
    yield monkeypatch
    monkeypatch.undo()
    get_registry(reload=True)


def test_rlcore_check_names_the_package_when_it_is_not_loaded(tmp_path, env, capsys):
    env.setenv("RL_CORE_BLOCK_PLUGINS", "rl-exact")
    get_registry(reload=True)
    assert main(["check", str(write_tiny_run(tmp_path, **{"rollout.exact": True})), "--skip-device-check"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "rollout.exact" in err and "rl-exact" in err and "pip install rl-exact" in err, err
