"""rl-reward-model's config section ``reward_model`` (rl_reward_model.config.RewardModelConfig, a ConfigSectionCard, with
its own ``reward_model.judge`` under it): read and checked as core's own sections when the package is installed, refused
with "pip install rl-reward-model" when it is not; core's readers (pools, worker roles, the memory estimate, the resolver)
see an absent section as no reward model."""

from __future__ import annotations

import pytest
from rl_core import plugins
from rl_core.config.load import config_to_dict, load_report
from rl_core.config.normalize import normalize
from rl_core.config.schema import RunConfig
from rl_core.placement.worker import worker_roles
from rl_core.plan.features import load_features
from rl_memory_estimate.estimate import estimate
from rl_core.util.user_paths import section_enabled
from rl_reward_model.config import JudgeConfig, RewardModelConfig, RewardModelModelConfig

ON = ["reward_model.enable=true", "reward_model.model.path=/tmp/rm", "reward_model.micro_batch_size_per_gpu=2", "reward_model.judge.max_new_tokens=8"]


def _errors(loaded):
    return {p.key: p.render() for p in loaded.problems if p.severity == "error"}


def test_the_section_is_read_checked_and_written_back():
    loaded = load_report("examples/quickstart.yaml", ON)
    assert not _errors(loaded)
    config = loaded.config
    assert config.reward_model.enable and config.reward_model.model == RewardModelModelConfig(path="/tmp/rm")
    assert config.reward_model.micro_batch_size_per_gpu == 2 and config.reward_model.judge == JudgeConfig(max_new_tokens=8)
    assert section_enabled(config, "reward_model") and not section_enabled(RunConfig(), "reward_model")
    assert RunConfig().reward_model == RewardModelConfig()
    data = config_to_dict(config)
    assert data["reward_model"]["model"]["path"] == "/tmp/rm" and data["reward_model"]["judge"]["max_new_tokens"] == 8 and "sections" not in data
    assert load_report(None, base=data).config.reward_model == config.reward_model
    bad = _errors(load_report("examples/quickstart.yaml", ["reward_model.enabel=true", "reward_model.strategy=zero3", "reward_model.micro_batch_size_per_gpu=0"]))
    assert "reward_model.enabel" in bad  # refused (rl-verl, when installed, names it as a verl key rl-core does not have)
    assert "fsdp" in bad["reward_model.strategy"] and "reward_model.micro_batch_size_per_gpu" in bad


def test_without_the_package_the_keys_name_it(monkeypatch):
    monkeypatch.setenv(plugins.BLOCK_ENV, "rl-reward-model,rl-verl")  # rl-verl requires rl-reward-model (verl's reward_model.* keys)
    try:
        registry = plugins.get_registry(reload=True)
        errors = _errors(load_report("examples/quickstart.yaml", ["reward_model.enable=true"]))
        assert "pip install rl-reward-model" in errors["reward_model"], errors
        config = load_report("examples/quickstart.yaml", ["model.path=Qwen/Qwen2.5-0.5B-Instruct"]).config  # a known shape
        with pytest.raises(AttributeError, match="reward_model"):
            config.reward_model
        assert not section_enabled(config, "reward_model") and "reward_model" not in worker_roles(config)
        _, sizes, problems = normalize(config)
        assert sizes is not None and "reward_model" not in sizes.pools and not [p for p in problems if p.severity == "error"]
        est = estimate(config, sizes, available=80 * 2**30, features=load_features(registry, []))
        assert est is not None and not [k for k in [*est.terms, *est.phases] if "reward model" in k]
    finally:
        monkeypatch.delenv(plugins.BLOCK_ENV)
        plugins.get_registry(reload=True)
    assert RunConfig().reward_model == RewardModelConfig()
