"""A rollout pool of its own: what the loop and the workers ask of the package that drives it (rl-async, docs/async.md).

``rollout.n_gpus_per_node`` gives the rollout workers of their own: a pool in ``Sizes.pools`` that the placement
starts as it starts a critic's (:mod:`rl_core.placement.pools`), holding only the rollout engine. What runs on it,
the step schedule and the train -> rollout weight transfer, comes from the one installed
:class:`~rl_core.cards.RolloutPoolCard` (hook ``rl_core_register_rollout_pools``), resolved once into the Plan
(``Plan.rollout_pool``, ``rollout_pool_fn``, ``rollout_pool_worker_fn``); core imports no package for it.

- Controller: the trainer calls ``rollout_pool_fn(RolloutPoolHandle(...))`` once, then :meth:`RolloutSchedule.start`,
  and from then on asks the schedule for each step's prompts and batch and to send the weights after each update.
- Workers: every worker of the train and rollout pools builds ``rollout_pool_worker_fn(worker)`` (the
  :class:`~rl_core.placement.worker.HybridWorker`: its ``stack``, ``context``, ``actor``, ``rollout``,
  ``weight_version`` and ``generate``). The schedule calls the extension's methods, those the card's ``methods``
  names, through ``WorkerMethod.EXTENSION`` with ``(name, *args)``; its ``close()``, if any, runs when the worker
  shuts down.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

import attrs

# rl_core.batch.Batch / rl_core.backends.SamplingParams (not imported: torch)
Batch = Any


@attrs.frozen(kw_only=True)
class RolloutPoolHandle:
    """What the loop hands a rollout pool's schedule.

    ``rollout`` / ``train``: the two pools' placements (:class:`~rl_core.placement.contract.Placement`);
    ``split(prompts, params) -> (per-rank args, pad)`` and ``merge(results, pad, params) -> Batch``: the
    controller's rollout dispatch (each rank's ``(shard, params)``, and the replicas' results put together);
    ``draw()``: the loader's next prompts, ``loader_state()``: its position (what a checkpoint saves)."""

    config: Any
    rollout: Any
    train: Any
    split: Callable[..., tuple[list[tuple], int]]
    merge: Callable[..., Batch]
    draw: Callable[[], Batch]
    loader_state: Callable[[], dict]


class RolloutSchedule(Protocol):
    """The controller's side of a rollout pool, step ``k`` of the loop."""

    def start(self) -> None:
        """Connect the pools and send the first weights (policy version 0); a failure raises (the loop closes the
        workers: some may be blocked waiting for their peers)."""

    def prompts(self, step: int) -> Batch:
        """Step ``step``'s prompts (drawn ahead of time, maybe generating already, or the loader's next)."""

    def batch(self, step: int, params: Any, trainer_version: int) -> tuple[Batch, dict[str, float]]:
        """Step ``step``'s generated batch for a trainer at policy ``trainer_version``, and its metrics."""

    def prefetch(self, step: int, params: Any) -> None:
        """Step ``step``'s prompts may start generating now (during the update of the step before)."""

    def receive_pending(self) -> None:
        """The last step: nothing is prefetched; weights still in the air are taken in during this step."""

    def drain(self) -> None:
        """Wait for what is in flight on the rollout pool (before the rollout workers are asked for anything else)."""

    def sync(self, version: int) -> float:
        """Send the actor's weights as policy ``version``, checked on both sides; seconds."""

    def data_state(self) -> dict | None:
        """The loader position a checkpoint saves (None: the loader's own)."""

    def close(self) -> None:
        """The run ends (finished, failed or stopped)."""
