"""rollout.precision=fp8 (rl_rollout_correction.precision): refused for the hf rollout and where the device has no FP8,
the rollout correction (TIS) on by default, the engines' arguments."""

from __future__ import annotations

import types

import pytest
from rl_core.cards import RolloutCard
from rl_core.config.schema import ModelConfig, RolloutConfig, RunConfig, TrainerConfig
from rl_core.config.sections import evolve_key
from rl_rollout_correction import precision
from rl_rollout_correction.config import RolloutCorrectionConfig
from rl_core.rollout.builtin import HF_ROLLOUT


def _config(name="vllm", prec="fp8", device="cuda", **rollout):
    return RunConfig(model=ModelConfig(dtype="bfloat16"), rollout=RolloutConfig(name=name, precision=prec, **rollout), trainer=TrainerConfig(device=device))


def _registry(*cards):
    return types.SimpleNamespace(cards={"rollout": {c.name: c for c in cards}})


FP8_CARD = RolloutCard(name="vllm", factory="x:y", fp8=True)


def test_the_hf_rollout_is_refused_and_fp8_engines_pass():
    reg = _registry(HF_ROLLOUT, FP8_CARD)
    (problem,) = precision.backend_problems(_config("hf"), reg)
    assert problem.key == "rollout.precision" and "no FP8 kernels" in problem.what and "rollout.name=vllm" in problem.fix
    assert precision.backend_problems(_config("vllm"), reg) == []
    assert precision.backend_problems(_config("hf", "auto"), reg) == []


@pytest.mark.parametrize("capability,refused", [((8, 0), True), ((8, 6), True), ((8, 9), False), ((9, 0), False), ((10, 0), False)])
def test_devices_without_fp8_are_refused(capability, refused):
    problems = precision.device_problems(_config(), _registry(), capability=capability)
    assert bool(problems) == refused
    if refused:
        assert f"{capability[0]}.{capability[1]}" in problems[0].what and "rollout.precision=auto" in problems[0].fix


def test_fp8_on_a_cpu_is_refused():
    (problem,) = precision.device_problems(_config(device="cpu"), _registry(), capability=(9, 0))
    assert "GPUs only" in problem.what


def test_tis_is_on_by_default_when_the_rollout_precision_differs():
    cfg = precision.apply_defaults(_config())
    assert cfg.rollout.calculate_log_probs is True
    assert cfg.algorithm.rollout_correction.rollout_is == "token"
    assert cfg.algorithm.rollout_correction.rollout_is_threshold == 2.0  # truncation (TIS)
    # the user's choice stays
    mine = evolve_key(RunConfig(rollout=RolloutConfig(name="vllm", precision="fp8")), "algorithm.rollout_correction",
                      RolloutCorrectionConfig(rollout_is="sequence"))
    assert precision.apply_defaults(mine).algorithm.rollout_correction.rollout_is == "sequence"
    # the same precision: nothing changes
    same = _config(prec="auto")
    assert precision.apply_defaults(same) is same


def test_fp8_from_float32_weights_is_refused():
    cfg = RunConfig(model=ModelConfig(dtype="float32"), rollout=RolloutConfig(name="vllm", precision="fp8"), trainer=TrainerConfig(device="cuda"))
    (problem,) = precision.backend_problems(cfg, _registry(FP8_CARD))
    assert "float32" in problem.what and "model.dtype=bfloat16" in problem.fix


def test_the_schema_refuses_other_precisions():
    from rl_core.config.rules import check_config

    problems = check_config(RunConfig(rollout=RolloutConfig(precision="int4")))
    assert any(p.key == "rollout.precision" for p in problems)


def test_rlcore_check_reports_fp8_with_the_hf_rollout(tiny_model_dir):
    """Through every registered check (the plan `rlcore check` builds): the names check refuses it (the device stage,
    later in the fixing order, then does not run)."""
    from rl_core.plan.checks import plan_for

    cfg = RunConfig(model=ModelConfig(path=str(tiny_model_dir("qwen2")), dtype="bfloat16"), rollout=RolloutConfig(name="hf", precision="fp8"),
                    trainer=TrainerConfig(device="cpu"))
    plan, problems = plan_for(cfg)
    assert plan is None
    mine = [p for p in problems if p.key == "rollout.precision"]
    assert any("no FP8 kernels" in p.what for p in mine)
    same = plan_for(cfg.__class__(model=cfg.model, trainer=cfg.trainer))[1]  # the same run in model.dtype
    assert not [p for p in same if p.key == "rollout.precision"]


def test_the_plan_carries_tis_on(tiny_model_dir, monkeypatch):
    """What the run uses is the resolved plan's config: with an FP8 rollout it has the rollout log-probs and TIS on."""
    import attrs
    from rl_core.plan.resolver import resolve
    from rl_core.plugins import get_registry

    registry = get_registry()
    monkeypatch.setitem(registry.cards["rollout"], "hf", attrs.evolve(registry.cards["rollout"]["hf"], fp8=True))  # a stand-in FP8 engine
    cfg = RunConfig(model=ModelConfig(path=str(tiny_model_dir("qwen2")), dtype="bfloat16"), rollout=RolloutConfig(name="hf", precision="fp8"),
                    trainer=TrainerConfig(device="cpu"))
    plan, problems = resolve(cfg, registry)
    assert plan is not None, [p.render() for p in problems]
    assert plan.config.rollout.calculate_log_probs is True
    assert plan.config.algorithm.rollout_correction.rollout_is == "token"
