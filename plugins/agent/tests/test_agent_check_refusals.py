"""``rlcore check`` refuses what train refuses on the agent side (issue 47); before, each passed check and was a
traceback at the first rollout (the folder as tool config crashed ``check`` itself)."""

from __future__ import annotations

import pytest

from rl_agent.checks import agent_problems
from rl_agent.resolve import build_tools
from rl_agent.tools import ToolConfigError
from rl_core import hookimpl
from rl_core.cards import Provider, ToolCard
from rl_agent.config import MultiTurnConfig
from rl_core.config.schema import ModelConfig, RunConfig
from rl_core.config.sections import evolve_key
from rl_core.plugins import PluginManager


def no_docstring(x: int) -> str:
    return str(x)


class BrokenInit:
    def __init__(self, config, tool_schema):
        raise RuntimeError("needs an API endpoint in config.url")

    async def execute(self, instance_id, parameters, **kwargs):
        return "never"


class _Cards:
    @staticmethod
    @hookimpl
    def rl_core_register_tools(register):
        register(ToolCard(name="missing_module", factory="no_such_module_xyz:tool"))
        register(ToolCard(name="missing_attr", factory="rl_agent.calculator:no_such_function"))
        register(ToolCard(name="no_schema", factory=no_docstring))


@pytest.fixture(scope="module")
def registry():
    pm = PluginManager()
    pm.load_entrypoints()
    pm.register_module(_Cards, Provider(distribution="rl-agent-check-tests", version="1.0", entry_point="x"))
    return pm.build_registry()


def _cfg(**mt) -> RunConfig:
    return evolve_key(RunConfig(model=ModelConfig(path="unused")), "rollout.multi_turn", MultiTurnConfig(enable=True, **mt))


CASES = {
    "factory module missing": ("missing_module", "no_such_module_xyz"),
    "factory attribute missing": ("missing_attr", "no_such_function"),
    "tool without a schema": ("no_schema", "docstring"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_tool_that_does_not_build_is_refused_by_check_and_by_train(registry, case):
    name, shown = CASES[case]
    cfg = _cfg(tools=["calculator", name])
    (p,) = agent_problems(cfg, registry)
    assert p.key == "rollout.multi_turn.tools[1]" and p.severity == "error" and shown in p.what and name in p.what, p
    assert "rl-agent-check-tests" in p.what
    with pytest.raises(ToolConfigError, match=shown):  # train: the same, as a clear error (no traceback)
        build_tools(cfg.rollout.multi_turn, registry)


def test_a_verl_tool_class_whose_init_raises_is_refused(registry, tmp_path):
    path = tmp_path / "tools.yaml"
    path.write_text("tools:\n  - class_name: test_agent_check_refusals.BrokenInit\n    config: {}\n"
                    "    tool_schema: {type: function, function: {name: broken, description: x, parameters: {type: object, properties: {}}}}\n")
    (p,) = agent_problems(_cfg(tool_config_path=str(path)), registry)
    assert p.key == "rollout.multi_turn.tool_config_path" and "BrokenInit" in p.what and "needs an API endpoint" in p.what, p
    assert "tools[0]" in p.what


def test_a_folder_as_tool_config_is_refused_not_a_crash(registry, tmp_path):
    (p,) = agent_problems(_cfg(tool_config_path=str(tmp_path)), registry)
    assert p.key == "rollout.multi_turn.tool_config_path" and "is a folder" in p.what, p


def test_a_tool_config_that_is_not_text_is_refused(registry, tmp_path):
    path = tmp_path / "tools.yaml"
    path.write_bytes(b"\xff\xfe\x00binary")
    (p,) = agent_problems(_cfg(tool_config_path=str(path)), registry)
    assert p.key == "rollout.multi_turn.tool_config_path" and "cannot be read" in p.what, p
