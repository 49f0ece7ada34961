"""rl-agent-openai: train agents written against the OpenAI API, unmodified, with rl-core.

During a multi-turn rollout (``rollout.multi_turn.agent_loop: openai_agent``) every trajectory is one run of the
user's agent program (a Python callable or a command, :mod:`rl_agent_openai.programs`) talking to an
OpenAI-compatible endpoint on loopback (:mod:`rl_agent_openai.server`) that the rollout engine answers: its
requests of a turn are decoded together through the engine's batched decode, and every call's exact token ids
and log-probs are recorded (:mod:`rl_agent_openai.session`), so the trainer sees exactly what was sampled, with
the agent's own text between calls masked out of the loss (:mod:`rl_agent_openai.runtime`).

- :mod:`rl_agent_openai.options`: ``rollout.multi_turn.program`` (the program, its limits, the failure score);
- :mod:`rl_agent_openai.openai_format`: OpenAI messages, tools and tool calls <-> the chat template's messages;
- :mod:`rl_agent_openai.reward`: the ``agent_reward`` reward (the program's returned reward, else a fallback);
- :mod:`rl_agent_openai.plugin`: the entry point (the ``openai_agent`` loop card, the reward card, the check).
"""

__version__ = "0.1.0"
