"""rl-train-fsdp's config sections ``actor.fsdp_config`` / ``critic.fsdp_config`` (rl_train_fsdp.config, ConfigSectionCards):
read and checked as core's own sections when the package is installed, refused with "pip install rl-train-fsdp" when it
is not; core's readers (the memory estimate, the offload feature's keys) see an absent section as its defaults."""

from __future__ import annotations

import pytest
from rl_core import plugins
from rl_core.config.load import config_to_dict, load_report
from rl_core.config.normalize import normalize
from rl_core.config.schema import RunConfig
from rl_core.plan.features import load_features, missing_feature_problems
from rl_memory_estimate.estimate import estimate
from rl_train_fsdp.config import CriticFsdpConfig, FsdpConfig

ON = ["actor.fsdp_config.fsdp_size=2", "actor.fsdp_config.reduce_dtype=bfloat16", "critic.fsdp_config.param_offload=true"]
SHAPE_MODEL = ["model.path=Qwen/Qwen2.5-0.5B-Instruct"]  # a known hub shape: the estimate needs no download


def _errors(loaded):
    return {p.key: p.render() for p in loaded.problems if p.severity == "error"}


def test_the_sections_are_read_checked_and_written_back():
    loaded = load_report("examples/quickstart.yaml", ON)
    assert not _errors(loaded)
    config = loaded.config
    assert config.actor.fsdp_config == FsdpConfig(fsdp_size=2, reduce_dtype="bfloat16")
    assert config.critic.fsdp_config == CriticFsdpConfig(param_offload=True)
    assert RunConfig().actor.fsdp_config == FsdpConfig() and RunConfig().critic.fsdp_config == CriticFsdpConfig()
    data = config_to_dict(config)
    assert data["actor"]["fsdp_config"]["fsdp_size"] == 2 and "sections" not in data["actor"] and "sections" not in data["critic"]
    assert load_report(None, base=data).config.actor.fsdp_config == config.actor.fsdp_config
    bad = _errors(load_report("examples/quickstart.yaml", ["actor.fsdp_config.param_ofload=true", "actor.fsdp_config.reduce_dtype=float16",
                                                           "actor.fsdp_config.fsdp_size=0", "critic.fsdp_config.fsdp_size=2"]))
    assert "param_offload" in bad["actor.fsdp_config.param_ofload"]  # the typo named with the key meant
    assert "bfloat16" in bad["actor.fsdp_config.reduce_dtype"] and "actor.fsdp_config.fsdp_size" in bad
    assert "critic.fsdp_config.fsdp_size" in bad  # the critic's section has the offload switches only


def test_without_the_package_the_keys_name_it(monkeypatch):
    monkeypatch.setenv(plugins.BLOCK_ENV, "rl-train-fsdp")
    try:
        registry = plugins.get_registry(reload=True)
        errors = _errors(load_report("examples/quickstart.yaml", ["actor.fsdp_config.param_offload=true", "critic.fsdp_config.offload_policy=true"]))
        for key in ("actor.fsdp_config", "critic.fsdp_config"):
            assert "pip install rl-train-fsdp" in errors[key], errors
        config = load_report("examples/quickstart.yaml", SHAPE_MODEL).config
        with pytest.raises(AttributeError, match="fsdp_config"):
            config.actor.fsdp_config
        _, sizes, _ = normalize(config)
        assert estimate(config, sizes, available=80 * 2**30, features=load_features(registry, [])) is not None  # defaults: no HSDP, no offload
        assert missing_feature_problems(config, load_features(registry, [])) == []  # the offload keys read as off
    finally:
        monkeypatch.delenv(plugins.BLOCK_ENV)
        plugins.get_registry(reload=True)
    assert RunConfig().actor.fsdp_config == FsdpConfig()
