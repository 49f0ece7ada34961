"""Asynchronous RL: a rollout pool of its own, versioned weight transfer, bounded-staleness training (issue #34).

- :mod:`rl_core.async_rl.transfer`: the train -> rollout broadcast group (gloo / NCCL), bucketed, verified.
- :mod:`rl_core.async_rl.staleness`: policy versions, the staleness gate (drop / wait), its metrics.
- :mod:`rl_core.async_rl.pipeline`: the controller's schedule (generation of step k+1 during the update of step k).
"""
