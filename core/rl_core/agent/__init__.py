"""Agentic (multi-turn, tool-calling) rollouts: tools, tool-call parsers and agent loops as plugins.

- :mod:`rl_core.agent.tools`: the :class:`~rl_core.agent.tools.Tool` object, tools from typed
  functions, verl's tool-config YAML, and calling a tool with a timeout (errors become results);
- :mod:`rl_core.agent.calculator`, :mod:`rl_core.agent.sandbox`: the built-in ``calculator`` and ``python`` tools;
- :mod:`rl_core.agent.parsers`: tool-call formats by name (``hermes``);
- :mod:`rl_core.agent.chat`: the tokens a chat template inserts between turns, and the token check;
- :mod:`rl_core.agent.loop`: what an agent loop receives and returns; :mod:`rl_core.agent.tool_agent`: the built-in loop;
- :mod:`rl_core.agent.runner`: many loops over one engine, their turns batched, into the rollout batch.
"""
