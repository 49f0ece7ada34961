"""Allow / block lists say what they did (issue 11, item 8 of the issue)."""

from __future__ import annotations

import logging

import pytest
from rl_core.plugins import UnknownCardError, get_registry

from tests.reliability import tally

pytest.importorskip("rl_train_fsdp", reason="needs the rl-train-fsdp plugin installed, to block it")


@pytest.fixture
def env(monkeypatch):
    yield monkeypatch
    monkeypatch.undo()
    get_registry(reload=True)


def test_blocked_plugin_is_reported_as_blocked(env):
    env.setenv("RL_CORE_BLOCK_PLUGINS", "rl-train-fsdp")
    registry = get_registry(reload=True)
    with pytest.raises(UnknownCardError) as info:
        registry.get("train", "fsdp")
    msg = str(info.value)
    ok = "blocked by RL_CORE_BLOCK_PLUGINS=rl-train-fsdp" in msg and "pip install" not in msg
    tally.record("user_errors", "blocked plugin named in the config", ok)
    assert ok, msg


def test_plugin_outside_the_allow_list_is_reported_as_such(env):
    env.setenv("RL_CORE_PLUGINS", "rl-reward-rule")
    with pytest.raises(UnknownCardError, match="not in the allow list RL_CORE_PLUGINS=rl-reward-rule"):
        get_registry(reload=True).get("train", "fsdp")


@pytest.mark.parametrize("var", ["RL_CORE_PLUGINS", "RL_CORE_BLOCK_PLUGINS"])
def test_unknown_names_in_the_lists_are_warned_about(env, caplog, var):
    env.setenv(var, "rl-train-fsdp,rl-trian-fsdp")
    with caplog.at_level(logging.WARNING):
        registry = get_registry(reload=True)
    ok = any("'rl-trian-fsdp'" in w and var in w for w in registry.warnings) and "rl-trian-fsdp" in caplog.text
    ok = ok and not any("'rl-train-fsdp'" in w for w in registry.warnings)
    tally.record("user_errors", f"misspelt name in {var}", ok)
    assert ok, registry.warnings
