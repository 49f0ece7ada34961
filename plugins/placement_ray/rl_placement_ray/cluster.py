"""RayCluster: the hybrid workers as Ray actors, on one node or many.

The placement contract (:class:`rl_core.placement.contract.Placement`), as
:class:`rl_core.placement.local.LocalCluster`: ``call(method,
per_rank_args)`` runs the :class:`~rl_core.placement.contract.WorkerMethod` on every rank's
:class:`~rl_core.placement.worker.HybridWorker` and returns one result per rank, in
rank order; ``close()`` stops them. The controller does not know which one
it drives: it starts what the Plan's placement card builds (the ``ray`` card,
:mod:`rl_placement_ray.plugin`: ``RayCluster(plan, roles=..., pool=...)``).

Start-up: join or start Ray (:mod:`~rl_placement_ray.connect`), reserve
one bundle per rank (:mod:`~rl_placement_ray.pools`: ``trainer.nnodes``
x ``trainer.n_gpus_per_node``; the actor, reference, critic and rollout roles
are colocated in each rank's hybrid worker, so they share its bundle and its
GPU), start the actors and their process group
(:mod:`~rl_placement_ray.group`), then build the workers from the same
stack the local cluster gets.

A rank that fails or dies stops the run with an error naming the role, the
rank and its node (:meth:`RayWorkerGroup.wait`); checkpoints are renamed into
place only when complete, so the same command resumes from the last one.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from rl_core.placement.contract import Pending, WorkerMethod, per_rank

from rl_placement_ray.connect import connect, import_ray
from rl_placement_ray.group import RayWorkerGroup
from rl_placement_ray.pools import ResourcePool


class RayCluster:
    """One hybrid worker per rank, each in its own Ray actor.

    ``pool``: ``main`` (the actor's workers, ``trainer.nnodes`` x ``trainer.n_gpus_per_node``) or a role with a
    pool of its own (``critic``, ``ref``, ``rollout``: ``<role>.nnodes`` x ``<role>.n_gpus_per_node``,
    :mod:`rl_core.placement.pools`), whose workers hold ``roles`` only. The rollout pool's weights come from the
    train pool over a group of their own (:mod:`rl_core.async_rl.transfer`): :meth:`dead_ranks` and
    :meth:`where` let that transfer name a rollout actor that died.
    """

    def __init__(self, stack, *, log_placement: bool = True, roles: tuple[str, ...] | None = None, pool: str = "main") -> None:
        from rl_core.placement.worker import worker_roles

        ray = import_ray()
        config = stack.config
        trainer, rcfg = config.trainer, config.ray
        roles = tuple(roles) if roles is not None else worker_roles(config, pool, rollout=getattr(stack, "needs_rollout", True))
        section = trainer if pool == "main" else getattr(config, pool)
        self.world_size = stack.sizes.world_size if pool == "main" else stack.sizes.pools[pool][0]
        self.device = stack.sizes.device
        self.group: RayWorkerGroup | None = None
        self._owns_connection = connect(rcfg)
        try:
            pool_ = ResourcePool(roles, section.nnodes, section.n_gpus_per_node, self.device, rcfg.cpus_per_worker, section="trainer" if pool == "main" else pool)
            threads = trainer.torch_threads
            if threads is None and self.device == "cpu":
                threads = max(1, int(rcfg.cpus_per_worker))
            self.group = RayWorkerGroup(
                pool_,
                collective_timeout_s=rcfg.collective_timeout_s,
                start_timeout_s=rcfg.start_timeout_s,
                threads=threads,
                after_failure=(
                    f"\nThe last complete checkpoint (if any) is under {trainer.output_dir}/checkpoints: "
                    "run the same command to resume from it."
                ),
            )
            if log_placement:
                print(self.group.describe(), flush=True)
            device = "cuda:0" if self.device == "cuda" else "cpu"  # Ray shows each actor only its own GPU
            stack_ref = ray.put(stack)
            self.group.call_actors("start", [(stack_ref, device, trainer.seed, roles)] * self.world_size, "start (building the workers)")
        except BaseException:
            self.close(force=True)
            raise

    @property
    def role(self) -> str:
        return self.group.role

    @property
    def placement(self) -> list[dict[str, Any]]:
        return self.group.placement

    def submit(self, method: WorkerMethod, per_rank_args: Sequence[tuple] | None = None, *, same_args: tuple = ()) -> Pending:
        """Send ``method`` to every rank (``per_rank_args[r]`` or ``same_args`` for all); gather with ``.result()``."""
        method = WorkerMethod.named(method)
        args = per_rank(method, self.world_size, per_rank_args, same_args)
        return Pending(self.group.submit_actors("call", [(method.value, a) for a in args], method.value))

    def call(self, method: WorkerMethod, per_rank_args: Sequence[tuple] | None = None, *, same_args: tuple = ()) -> list[Any]:
        """Call ``method`` on every rank; ``per_rank_args[r]`` or ``same_args`` for all. One result per rank."""
        return self.submit(method, per_rank_args, same_args=same_args).result()

    def dead_ranks(self) -> list[tuple[int, None]]:
        """``(rank, None)`` of every actor Ray reports dead (no exit code: :meth:`where` names the node and pid)."""
        return self.group.dead_ranks() if self.group is not None else []

    def where(self, rank: int) -> str:
        """The node and process of ``rank`` (for errors)."""
        return self.group.where(rank) if self.group is not None else "a node not known"

    def run_on_workers(self, fn: Callable[..., Any], *args: Any) -> list[Any]:
        """``fn(info, *args)`` on every rank (a top-level function)."""
        return self.group.run(fn, *args)

    def close(self, force: bool = False) -> None:
        import ray

        if self.group is not None:
            self.group.close(force=force)
        if self._owns_connection and ray.is_initialized():
            ray.shutdown()
        self._owns_connection = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close(force=exc[0] is not None)
