"""rlcore check on rollout.multi_turn: unknown names, bad schemas and tool configs, templates that cannot carry the format."""

from __future__ import annotations

import attrs

from rl_agent.checks import agent_problems
from rl_core.cards import AgentLoopCard, Provider, ToolCard
from rl_agent.config import MultiTurnConfig
from rl_core.config.schema import ModelConfig, RolloutConfig, RunConfig
from rl_core.config.sections import evolve_key
from rl_core.plugins import PluginManager, get_registry
from rl_core_testing.tiny_model import make_tiny_model_dir


def _cfg(model="unused", **mt) -> RunConfig:
    return evolve_key(RunConfig(model=ModelConfig(path=str(model))), "rollout.multi_turn", MultiTurnConfig(enable=True, **mt))


def _keys(problems):
    return {(p.key, p.severity) for p in problems}


def test_names_schemas_and_tool_configs(tmp_path):
    reg = get_registry()
    assert agent_problems(_cfg(tools=["calculator"]), reg) == []
    assert agent_problems(attrs.evolve(_cfg(), rollout=RolloutConfig()), reg) == []  # off: nothing checked
    problems = agent_problems(_cfg(tools=["calculater", "python"], format="hermez", agent_loop="nope"), reg, rows=[{"agent_name": "ghost"}])
    text = "\n".join(p.render() for p in problems)
    assert _keys(problems) == {("rollout.multi_turn.tools[0]", "error"), ("rollout.multi_turn.format", "error"),
                               ("rollout.multi_turn.agent_loop", "error"), ("data: a row's agent_name", "error")}
    assert "did you mean 'calculator'" in text and "did you mean 'hermes'" in text and "'ghost'" in text
    assert _keys(agent_problems(_cfg(), reg)) == {("rollout.multi_turn.tools", "warning")}

    bad = tmp_path / "tools.yaml"
    bad.write_text("tools:\n  - class_name: not_a_module_xyz.Tool\n    tool_schema: {type: function, function: {name: t}}\n")
    (p,) = agent_problems(_cfg(tool_config_path=str(bad)), reg)
    assert p.key == "rollout.multi_turn.tool_config_path" and "tools[0].class_name" in p.what and "not_a_module_xyz" in p.what

    class BadSchema:
        from rl_core import hookimpl

        @staticmethod
        @hookimpl
        def rl_core_register_tools(register):
            register(ToolCard(name="broken_schema", factory="rl_agent.calculator:calculator", schema={"type": "function", "function": {"name": "x y"}}))

    pm = PluginManager()
    pm.register_module(BadSchema, Provider(distribution="test", entry_point="bad"))
    reg2 = pm.build_registry()
    reg2.cards["tool_parser"].update(reg.cards["tool_parser"])
    reg2.cards["agent_loop"].update(reg.cards["agent_loop"])
    (p,) = agent_problems(_cfg(tools=["broken_schema"]), reg2)
    assert p.key == "rollout.multi_turn.tools[0]" and "function.name" in p.what


def test_no_tools_warns_only_for_a_loop_that_runs_the_configured_tools():
    """tool_agent (rl-agent's runtime) runs rollout.multi_turn.tools, so none configured is a warning; a loop with a
    runtime of its own (rl-agent-openai's program brings its tools) is not warned, whose own check says to leave them empty."""

    class OwnRuntime:
        from rl_core import hookimpl

        @staticmethod
        @hookimpl
        def rl_core_register_agent_loops(register):
            register(AgentLoopCard(name="own_loop", factory="x:loop", runner="x:OwnRuntime"))

    reg = get_registry()
    pm = PluginManager()
    pm.register_module(OwnRuntime, Provider(distribution="test", entry_point="own"))
    reg2 = pm.build_registry()
    reg2.cards["tool_parser"].update(reg.cards["tool_parser"])
    reg2.cards["agent_loop"].update(reg.cards["agent_loop"])
    assert _keys(agent_problems(_cfg(agent_loop="tool_agent"), reg2)) == {("rollout.multi_turn.tools", "warning")}
    assert agent_problems(_cfg(agent_loop="own_loop"), reg2) == []


def test_a_template_that_drops_tool_messages_cannot_carry_the_format(tmp_path):
    reg = get_registry()
    model = make_tiny_model_dir(tmp_path / "m")
    assert agent_problems(_cfg(model, tools=["calculator"]), reg) == []  # ChatML renders the tool role
    from rl_core.modeling import load_tokenizer

    tok = load_tokenizer(model)
    tok.chat_template = "{% for m in messages %}{% if m['role'] != 'tool' %}{{ m['content'] }}{% endif %}{% endfor %}"
    tok.save_pretrained(model)
    (p,) = agent_problems(_cfg(model, tools=["calculator"]), reg)
    assert p.key == "rollout.multi_turn.format" and "drops tool messages" in p.what
    tok.chat_template = "{% for m in messages %}{% if m['role'] == 'tool' %}{{ raise_exception('no tools') }}{% endif %}{{ m['content'] }}{% endfor %}"
    tok.save_pretrained(model)
    (p,) = agent_problems(_cfg(model, tools=["calculator"]), reg)
    assert "cannot render a tool message" in p.what and "no tools" in p.what
