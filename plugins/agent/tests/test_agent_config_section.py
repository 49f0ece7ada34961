"""rl-agent's config section ``rollout.multi_turn`` (rl_agent.config, a ConfigSectionCard): read and checked as core's
own sections when the package is installed, refused with "pip install rl-agent" when it is not; core's readers see an
absent section as multi-turn off (rl_core.rollout.multi_turn.multi_turn_on, the Plan's agent runtime None)."""

from __future__ import annotations

import pytest
from rl_agent.config import MultiTurnConfig
from rl_core import plugins
from rl_core.config.load import config_to_dict, load_report
from rl_core.config.schema import RunConfig
from rl_core.rollout.multi_turn import agent_runtime, multi_turn_on

ON = ["rollout.multi_turn.enable=true", "rollout.multi_turn.tools=[calculator]", "rollout.multi_turn.max_assistant_turns=3"]


def _errors(loaded):
    return {p.key: p.render() for p in loaded.problems if p.severity == "error"}


def test_the_section_is_read_checked_and_written_back():
    loaded = load_report("examples/quickstart.yaml", ON)
    assert not _errors(loaded)
    config = loaded.config
    assert config.rollout.multi_turn == MultiTurnConfig(enable=True, tools=["calculator"], max_assistant_turns=3)
    assert multi_turn_on(config) and not multi_turn_on(RunConfig()) and RunConfig().rollout.multi_turn == MultiTurnConfig()
    data = config_to_dict(config)
    assert data["rollout"]["multi_turn"]["tools"] == ["calculator"] and "sections" not in data["rollout"]
    assert load_report(None, base=data).config.rollout.multi_turn == config.rollout.multi_turn
    bad = _errors(load_report("examples/quickstart.yaml", ["rollout.multi_turn.max_asistant_turns=3", "rollout.multi_turn.tool_response_truncate_side=up",
                                                           "rollout.multi_turn.max_parallel_calls=0"]))
    assert "max_assistant_turns" in bad["rollout.multi_turn.max_asistant_turns"]  # the typo named with the key meant
    assert "middle" in bad["rollout.multi_turn.tool_response_truncate_side"] and "rollout.multi_turn.max_parallel_calls" in bad


def test_without_the_package_the_keys_name_it(monkeypatch):
    monkeypatch.setenv(plugins.BLOCK_ENV, "rl-agent,rl-agent-openai")
    try:
        registry = plugins.get_registry(reload=True)
        errors = _errors(load_report("examples/quickstart.yaml", ["rollout.multi_turn.enable=true"]))
        assert "pip install rl-agent" in errors["rollout.multi_turn"], errors
        config = RunConfig()
        with pytest.raises(AttributeError, match="multi_turn"):
            config.rollout.multi_turn
        assert not multi_turn_on(config) and agent_runtime(config, registry) == (None, [])  # off, as core reads it
    finally:
        monkeypatch.delenv(plugins.BLOCK_ENV)
        plugins.get_registry(reload=True)
    assert RunConfig().rollout.multi_turn == MultiTurnConfig()
