"""A rollout pool of its own (``rollout.n_gpus_per_node``): what the loop and the workers ask of the package that drives
it (rl-async, docs/async.md), through the Plan's one ``RolloutPoolCard``. The trainer calls
``rollout_pool_fn(RolloutPoolHandle(...))`` once and drives the returned :class:`RolloutSchedule`; every worker builds
``rollout_pool_worker_fn(worker)``, whose ``methods`` the schedule calls (``ExtensionMethod``) and whose ``close()``,
if any, runs at shutdown.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

import attrs

# rl_core.batch.Batch / rl_core.backends.SamplingParams (not imported: torch)
Batch = Any


@attrs.frozen(kw_only=True)
class RolloutPoolHandle:
    """What the loop hands a rollout pool's schedule: the two pools' placements (``rollout``, ``train``), the controller's
    rollout dispatch (``split(prompts, params) -> (per-rank args, pad)``, ``merge(results, pad, params) -> Batch``),
    ``draw()`` (the loader's next prompts) and ``loader_state()`` (what a checkpoint saves)."""

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
