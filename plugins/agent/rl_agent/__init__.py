"""rl-agent: agentic (multi-turn, tool-calling) rollouts for rl-core: tools, tool-call parsers and agent loops as plugins.

- :mod:`rl_agent.tools`: the :class:`~rl_agent.tools.Tool` object, tools from typed
  functions, verl's tool-config YAML, and calling a tool with a timeout (errors become results);
- :mod:`rl_agent.containment`: a tool call cannot end the run (exit attempts, invalid text, floods);
- :mod:`rl_agent.calculator`, :mod:`rl_agent.sandbox`: the built-in ``calculator`` and ``python`` tools
  (:mod:`rl_agent.sandbox_ns`: its sandbox without bubblewrap);
- :mod:`rl_agent.parsers`: tool-call formats by name (``hermes``);
- :mod:`rl_agent.chat`: the tokens a chat template inserts between turns, and the token check;
- :mod:`rl_agent.loop`: what an agent loop receives and returns; :mod:`rl_agent.tool_agent`: the built-in loop;
- :mod:`rl_agent.runner`: many loops over one engine, their turns batched, into the rollout batch
  (:class:`~rl_agent.runner.AgentRuntime`: what rollout backends call, the ``tool_agent`` card's runner);
- :mod:`rl_agent.checks`: ``rlcore check``'s checks of ``rollout.multi_turn`` (a probe registered by :mod:`rl_agent.plugin`);
- :mod:`rl_agent.testing`: fixtures; :mod:`rl_agent.conformance`: the rollout conformance suite's multi-turn case.

Importing this package is cheap; the entry point :mod:`rl_agent.plugin` registers the cards.
"""

__version__ = "0.1.0"
