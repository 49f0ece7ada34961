"""The placement contract: how the controller starts workers, calls them, gathers results and stops them
(docs/design.md, ``Placement``). Implemented by ``LocalCluster`` (local.py), rl-placement-ray's ``RayCluster`` and
``PooledCluster`` (pools.py); the trainer loop talks only to :class:`Placement`, naming a :class:`WorkerMethod`.
After a failure a placement is closed: the other ranks may be blocked in a collective with the failed one.
"""

from __future__ import annotations

import enum
from typing import Any, Callable, Protocol, Sequence, runtime_checkable

import attrs


class WorkerError(RuntimeError):
    """A worker failed or died during a call; the message names the pool, the rank and the method."""


class WorkerMethod(str, enum.Enum):
    """Every method the controller may call on a worker. ``role``: the pool that runs it when that role has workers of
    its own (else the main pool); ``every_pool``: every worker of every pool runs it, for the roles it holds."""

    GENERATE = "generate"
    SYNC_WEIGHTS = "sync_weights"
    COMPUTE_LOG_PROB = "compute_log_prob"
    COMPUTE_REF_LOG_PROB = "compute_ref_log_prob"
    COMPUTE_VALUES = "compute_values"
    SCORE_WITH_MODEL = "score_with_model"
    UPDATE_ACTOR = "update_actor"
    UPDATE_CRITIC = "update_critic"
    SAVE_HF = "save_hf"
    SET_TOTAL_STEPS = "set_total_steps"
    SAVE_CHECKPOINT = "save_checkpoint"
    LOAD_CHECKPOINT = "load_checkpoint"
    PEAK_MEMORY_GB = "peak_memory_gb"
    # profiler.* (rl-profiling): the step whose calls the chosen ranks record (None: none)
    PROFILE_STEP = "profile_step"

    @property
    def role(self) -> str:
        return _ROLE.get(self, "actor")

    @property
    def every_pool(self) -> bool:
        return self in _EVERY_POOL

    @classmethod
    def named(cls, method: WorkerMethod | ExtensionMethod | str, extensions: frozenset = frozenset()) -> WorkerMethod | ExtensionMethod:
        """``method`` as a member of the table (or of ``extensions``, the worker extension's: :class:`ExtensionMethod`),
        or a ValueError listing the table."""
        if isinstance(method, ExtensionMethod):
            return method
        try:
            return cls(method)
        except ValueError:
            if method in extensions:
                return ExtensionMethod(method)
            known = ", ".join([m.value for m in cls] + sorted(extensions))
            raise ValueError(
                f"unknown worker method {method!r}: a placement calls only the methods of "
                f"rl_core.placement.contract.WorkerMethod ({known}); add a member there (and the method to "
                "rl_core.placement.worker.HybridWorker) to call a new one"
            ) from None


@attrs.frozen
class ExtensionMethod:
    """A method of the worker extension the Plan's ``RolloutPoolCard`` names (e.g. rl-async's ``send_weights``), called
    on one pool's placement like a member; the worker runs ``worker.extension.<value>``."""

    value: str
    role: str = "actor"  # the controller calls it on a pool's placement, never routed by role
    every_pool: bool = False


_ROLE = {
    WorkerMethod.GENERATE: "rollout",
    WorkerMethod.COMPUTE_VALUES: "critic",
    WorkerMethod.UPDATE_CRITIC: "critic",
    WorkerMethod.COMPUTE_REF_LOG_PROB: "ref",
    WorkerMethod.SCORE_WITH_MODEL: "reward_model",
}
_EVERY_POOL = frozenset(
    {WorkerMethod.SET_TOTAL_STEPS, WorkerMethod.SAVE_CHECKPOINT, WorkerMethod.LOAD_CHECKPOINT, WorkerMethod.PEAK_MEMORY_GB,
     WorkerMethod.PROFILE_STEP}
)


def after_a_death(errors: list[str]) -> list[str]:
    """Failure texts of one call; when a rank died (``" died during "``), the others' failures follow from it (a
    collective with a dead peer) and keep their first line only."""
    if not any(" died during " in e for e in errors):
        return errors
    return [e if " died during " in e else e.splitlines()[0] + " (after a peer died)" for e in errors]


def dispatch(worker: Any, method: WorkerMethod | ExtensionMethod | str, args: tuple) -> Any:
    """Run ``method`` on a worker (the worker side of a call, local and Ray alike), under its profiler when it has one
    (rl-profiling's ``worker_profiler``: ``around(method, role)``)."""
    m = WorkerMethod.named(method, getattr(worker, "extension_methods", frozenset()))
    fn = getattr(worker.extension if isinstance(m, ExtensionMethod) else worker, m.value)
    profiler = getattr(worker, "profiler", None)
    if profiler is None:
        return fn(*args)
    with profiler.around(m.value, m.role):
        return fn(*args)


def per_rank(method: WorkerMethod, world_size: int, per_rank_args: Sequence[tuple] | None, same_args: tuple) -> list[tuple]:
    """One argument tuple per rank: ``per_rank_args`` checked against ``world_size``, or ``same_args`` for all."""
    args = [tuple(a) for a in per_rank_args] if per_rank_args is not None else [tuple(same_args)] * world_size
    if len(args) != world_size:
        raise ValueError(f"{method.value}: got arguments for {len(args)} ranks, the placement has {world_size}")
    return args


class Pending:
    """A call sent to a pool's workers and not gathered yet; :meth:`result` waits for it (once)."""

    def __init__(self, collect: Callable[[], list[Any]]) -> None:
        self._collect: Callable[[], list[Any]] | None = collect
        self._result: list[Any] | None = None

    @property
    def waiting(self) -> bool:
        """Sent and not gathered yet."""
        return self._collect is not None

    def result(self) -> list[Any]:
        """One result per rank, in rank order; raises :class:`WorkerError` if a rank failed or died."""
        if self._collect is not None:
            collect, self._collect = self._collect, None
            self._result = collect()
        return self._result  # type: ignore[return-value]


class Done(Pending):
    """A call that already ran (in-process workers): its results, or the error it raised."""

    def __init__(self, run: Callable[[], list[Any]]) -> None:
        try:
            value, error = run(), None
        except BaseException as exc:  # noqa: BLE001 - raised again by result(), where the caller waits
            value, error = None, exc

        def collect() -> list[Any]:
            if error is not None:
                raise error
            return value  # type: ignore[return-value]

        super().__init__(collect)


@runtime_checkable
class Placement(Protocol):
    """One or several pools of workers. The constructor (or :func:`rl_core.placement.make_cluster`) returns once every
    worker has built its engines; a failure there raises :class:`WorkerError` and leaves nothing running."""

    #: ranks of the (main) pool: a per-rank call passes this many argument tuples
    world_size: int

    def submit(self, method: WorkerMethod, per_rank_args: Sequence[tuple] | None = None, *, same_args: tuple = ()) -> Pending:
        """Send ``method`` to every rank of the pool serving it (``per_rank_args[r]``, or ``same_args`` for all);
        returns at once. One call per pool is in flight at a time: gather it (``.result()``) before the next."""
        ...

    def call(self, method: WorkerMethod, per_rank_args: Sequence[tuple] | None = None, *, same_args: tuple = ()) -> list[Any]:
        """``submit(...).result()``: one result per rank, in rank order (for every-pool methods, pool after pool)."""
        ...

    def close(self, force: bool = False) -> None:
        """Stop the workers (``force``: kill them without asking); safe to call twice."""
        ...
