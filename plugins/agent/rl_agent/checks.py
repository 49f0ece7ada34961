"""``rlcore check`` probes for ``rollout.multi_turn``: every problem named by its key, nothing run.

- a tool name nobody registered (with the nearest name), a registered tool whose schema is not a
  function schema, whose factory does not import or gives no tool (no schema, no docstring to derive one);
- the ``python`` tool where no sandbox works here (install bubblewrap; :func:`rl_agent.sandbox.refusal`);
- ``tool_config_path``: the file (a folder is not one), each ``class_name`` importing, each ``tool_schema``,
  each verl tool class built (its ``__init__``);
- ``format`` and ``agent_loop`` not registered; a data row's ``agent_name`` not registered;
- a chat template that cannot carry the format: it fails on, or drops, a ``tool`` message, or changes
  the format's markers inside an assistant message (the model would never see what it wrote);
- ``enable`` without any tool (a warning).
"""

from __future__ import annotations

import os
from typing import Any

from rl_core.problems import Problem, did_you_mean

SENTINEL = "RLCORE-TOOL-RESULT-7f3a"
#: rl-agent's runtime (the tool_agent loop's runner): the one that runs rollout.multi_turn.tools
RUNNER = "rl_agent.runner:AgentRuntime"


def _unknown(registry, kind: str, name: str, key: str, what: str) -> Problem | None:
    if name in registry.cards.get(kind, {}):
        return None
    known = registry.names(kind)
    return Problem(
        key=key,
        what=f"no {what} named {name!r} is installed{did_you_mean(name, known)} (installed: {', '.join(known) or 'none'})",
        fix=f"use one of {known}, or install the plugin that provides it (rlcore plugins lists them)",
    )


def agent_problems(config: Any, registry: Any, rows: list[dict] | None = None) -> list[Problem]:
    mt = config.rollout.multi_turn
    if not mt.enable:
        return []
    from rl_agent.tools import as_tool, schema_problems, tool_config_problems

    out: list[Problem] = []
    for i, name in enumerate(mt.tools):
        p = _unknown(registry, "tool", name, f"rollout.multi_turn.tools[{i}]", "tool")
        if p:
            out.append(p)
            continue
        card = registry.cards["tool"][name]
        if card.schema is not None:
            problems = schema_problems(card.schema, f"the schema of tool {name!r} ({card.provider})")
            for what in problems:
                out.append(Problem(key=f"rollout.multi_turn.tools[{i}]", what=what, fix="fix the ToolCard's schema in the plugin that registers it"))
            if problems:
                continue
        try:  # as rollouts build it
            as_tool(card.load(), name=card.name, schema=card.schema)
        except Exception as exc:  # noqa: BLE001 - an import / attribute error, a ToolConfigError, the factory's own error
            out.append(Problem(key=f"rollout.multi_turn.tools[{i}]",
                               what=f"the tool {name!r} ({card.factory}, from {card.provider or 'an unregistered card'}) cannot be built: {type(exc).__name__}: {exc}",
                               fix="install or fix the plugin that registers it (a tool is a typed function with a docstring, or has a schema)"))
            continue
        if card.factory == "rl_agent.sandbox:python":
            from rl_agent.sandbox import refusal

            if (why := refusal()) is not None:
                out.append(Problem(key=f"rollout.multi_turn.tools[{i}]", what=why,
                                   fix="install bubblewrap (bwrap), or leave the python tool out of rollout.multi_turn.tools"))
    if mt.tool_config_path:
        out.extend(tool_config_problems(mt.tool_config_path))
    loop = registry.cards.get("agent_loop", {}).get(mt.agent_loop)
    runs_config_tools = loop is None or loop.runner in (None, RUNNER)  # another runtime (openai_agent's program) brings its own
    if not mt.tools and not mt.tool_config_path and runs_config_tools:
        out.append(Problem(key="rollout.multi_turn.tools", what="multi-turn rollouts are on but no tool is configured", severity="warning",
                           fix="name tools (e.g. rollout.multi_turn.tools=[calculator]) or a verl tool config (rollout.multi_turn.tool_config_path)"))
    for kind, key, name, what in (("tool_parser", "rollout.multi_turn.format", mt.format, "tool-call format"),
                                  ("agent_loop", "rollout.multi_turn.agent_loop", mt.agent_loop, "agent loop")):
        p = _unknown(registry, kind, name, key, what)
        if p:
            out.append(p)
    for name in sorted({r.get("agent_name") for r in rows or [] if r.get("agent_name")}):
        p = _unknown(registry, "agent_loop", name, "data: a row's agent_name", "agent loop")
        if p:
            out.append(p)
    if mt.format in registry.cards.get("tool_parser", {}):
        out.extend(template_problems(config, registry))
    return out


def agent_probe(config: Any, registry: Any) -> list[Problem]:
    """The plan's check (stage ``files``): :func:`agent_problems` with the data's first rows (their ``agent_name``), as
    the plan's ``files`` check read them."""
    if not config.rollout.multi_turn.enable:
        return []
    from rl_core.plan.preflight import data_rows

    return agent_problems(config, registry, data_rows(config, registry))


def template_problems(config: Any, registry: Any) -> list[Problem]:
    """The model's chat template must render a tool message and keep the format's markers (skipped when the tokenizer is not local)."""
    path = config.model.tokenizer_path or config.model.path
    if not path or not os.path.isdir(str(path)):
        return []
    try:
        from rl_core.modeling import load_tokenizer

        tok = load_tokenizer(path, trust_remote_code=config.model.trust_remote_code)
        parser = registry.cards["tool_parser"][config.rollout.multi_turn.format].load()()
    except Exception:  # noqa: BLE001 - other probes report a tokenizer or plugin that does not load
        return []
    if not getattr(tok, "chat_template", None):
        return []
    markers = tuple(getattr(parser, "markers", ()))
    call = "".join(markers) if markers else "call"
    messages = [{"role": "user", "content": "x"}, {"role": "assistant", "content": call}, {"role": "tool", "name": "t", "content": SENTINEL}]
    key = "rollout.multi_turn.format"
    try:
        text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    except Exception as exc:  # noqa: BLE001 - jinja errors, or the template's own raise_exception
        return [Problem(key=key, what=f"the chat template of {path} cannot render a tool message: {type(exc).__name__}: {exc}",
                        fix="use a model whose chat template has a tool role, or set model.tokenizer_path to a tokenizer with one")]
    if SENTINEL not in text:
        return [Problem(key=key, what=f"the chat template of {path} drops tool messages: a tool result would never reach the model",
                        fix="use a model whose chat template renders the tool role")]
    missing = [m for m in markers if m not in text]
    if missing:
        return [Problem(key=key, what=f"the chat template of {path} removes {missing} from assistant messages: format {config.rollout.multi_turn.format!r} cannot be expressed",
                        fix="choose the tool-call format the model's template uses (rlcore plugins lists tool_parser names)")]
    return []
