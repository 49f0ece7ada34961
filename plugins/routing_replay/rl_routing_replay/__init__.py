"""rl-routing-replay: MoE routing replay (``actor.router_replay`` R2 / R3, ``rollout.return_routed_experts``) for rl-core.

Light on purpose (the entry point ``rl_routing_replay.plugin`` imports it): the replay itself is
:mod:`rl_routing_replay.replay` (torch), the object core's hf rollout calls :mod:`rl_routing_replay.feature`, the checks
:mod:`rl_routing_replay.checks`.
"""
