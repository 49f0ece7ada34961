"""rl-async: asynchronous RL with a rollout pool of its own (issue #34, docs/async.md).

- :mod:`rl_async.transfer`: the train -> rollout broadcast group (gloo / NCCL), bucketed, verified.
- :mod:`rl_async.worker`: the workers' side of it, the worker extension of the Plan's rollout-pool card.
- :mod:`rl_async.staleness`: policy versions, the staleness gate (drop / wait), its metrics.
- :mod:`rl_async.pipeline`: the controller's schedule (generation of step k+1 during the update of step k).
- :mod:`rl_async.checks`: what ``rlcore check`` refuses.

Core keeps the contract (:mod:`rl_core.placement.rollout_pool`, :class:`rl_core.cards.RolloutPoolCard`), the pool's
sizing (``Sizes.pools["rollout"]``) and the ``async.*`` schema section.
"""
