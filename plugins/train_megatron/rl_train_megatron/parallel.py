"""Process groups for the Megatron engine: TP x CP x PP model-parallel groups, data parallelism over the rest.

Rank layout (``order="tp-cp-pp-dp"`` in ``parallel_state.initialize_model_parallel``):
the ``TP * CP * PP`` ranks of one model replica are consecutive, TP fastest, so
rank ``r`` has ``tp_rank = r % TP``, ``cp_rank = (r // TP) % CP``, ``pp_rank = (r // (TP * CP)) % PP`` and
``dp_rank = r // (TP * CP * PP)``. Context parallelism (CP): :mod:`rl_train_megatron.context_parallel`. That is how the controller dispatches a step
(:meth:`rl_core.trainer.loop.Trainer._train_call` gives the same data-parallel
shard to the ``world / train_dp`` consecutive ranks of a replica).

Expert parallelism (MoE models): ``train.expert_model_parallel_size`` (EP) ranks split each MoE layer's experts
and ``train.expert_tensor_parallel_size`` (ETP, default TP) slice each expert; megatron-core lays the expert ranks
out over the same processes (``world = ETP x EP x PP x expert-DP``; within a pipeline stage its ranks, in order, are split
expert TP first, then EP, then expert-DP: :func:`_replicas_consecutive`), so the data a rank gets does not change.
The expert TP may differ from TP (e.g. 1: each expert whole on its rank), with or without pipeline stages.
Expert gradients are summed over the expert-data-parallel group, the others over the data-parallel group.

megatron-core needs ``torch.distributed``: with no process group (one
process, e.g. tests or a one-rank run) :func:`acquire` starts a one-rank gloo
group in memory and :func:`release` tears it down when the last engine of
the process shuts down, so nothing outside the engine sees it.
"""

from __future__ import annotations

import contextlib

import attrs
import torch
import torch.distributed as dist

from rl_train_megatron.model import ParallelSizeError


@attrs.frozen
class Topology:
    tp: int
    pp: int
    dp: int
    tp_rank: int
    pp_rank: int
    dp_rank: int
    rank: int
    world: int
    cp: int = 1
    cp_rank: int = 0
    ep: int = 1
    ep_rank: int = 0
    etp: int = 1
    etp_rank: int = 0


_STATE = {"users": 0, "own_group": False, "sizes": None}


def acquire(tp: int, pp: int, device: torch.device, cp: int = 1, ep: int = 1, etp: int | None = None) -> Topology:
    """Set up (once per process) the default group and megatron's parallel state; returns this rank's place."""
    etp = tp if etp is None else etp
    from megatron.core import parallel_state as mpu

    if not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        _STATE["own_group"] = True
    world = dist.get_world_size()
    if world % (tp * cp * pp):
        mp = tp * cp * pp
        raise ParallelSizeError(
            f"train.tensor_model_parallel_size={tp} x train.context_parallel_size={cp} x train.pipeline_model_parallel_size={pp} = {mp} "
            f"does not divide the {world} worker processes ({world} % {mp} = {world % mp}); choose TP x CP x PP among the divisors of {world}"
        )
    if world % (etp * ep * pp):
        raise ParallelSizeError(
            f"train.expert_tensor_parallel_size={etp} x train.expert_model_parallel_size={ep} x train.pipeline_model_parallel_size={pp} "
            f"= {etp * ep * pp} does not divide the {world} worker processes; choose EP (and ETP) so that ETP x EP x PP divides {world}"
        )
    if mpu.model_parallel_is_initialized():
        if _STATE["sizes"] != (tp, pp, cp, ep, etp):
            raise ParallelSizeError(f"megatron parallel state is already set up with TP, PP, CP, EP, ETP = {_STATE['sizes']}, this engine asks for {(tp, pp, cp, ep, etp)}")
    else:
        order = "tp-cp-ep-dp" if ep > 1 else "tp-cp-dp"
        with _replicas_consecutive(mpu, tp * cp, world // (tp * cp * pp), pp):
            mpu.initialize_model_parallel(
                tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp, context_parallel_size=cp, order=order + "-pp",
                create_gloo_process_groups=False, expert_model_parallel_size=ep, expert_tensor_parallel_size=etp,
            )
        _STATE["sizes"] = (tp, pp, cp, ep, etp)
        if device.type == "cuda":
            from megatron.core import tensor_parallel

            tensor_parallel.model_parallel_cuda_manual_seed(1234)
    from rl_train_megatron import cpu_shims

    cpu_shims.install(device)  # (nothing unless the device is the CPU)
    _STATE["users"] += 1
    return current()


def stage_major_rank(virtual: int, inner: int, dp: int, pp: int) -> int:
    """megatron-core's rank ``virtual`` in the pipeline-last order (``tp-cp-[ep-]dp-pp``: stage ``virtual // (inner x dp)``)
    -> the process that plays it, a replica's ``inner = TP x CP`` ranks of each stage being consecutive and its stages
    next to each other (``tp-cp-pp-dp``: the controller's dispatch)."""
    i, d, p = virtual % inner, (virtual // inner) % dp, virtual // (inner * dp)
    return i + inner * (p + pp * d)


@contextlib.contextmanager
def _replicas_consecutive(mpu, inner: int, dp: int, pp: int):
    """``initialize_model_parallel`` with its rank groups renumbered by :func:`stage_major_rank`.

    megatron-core lays out the attention ranks (TP x CP x PP x DP) and the expert ranks (expert TP x EP x PP x expert-DP)
    by two rank generators over one order and asserts that both give the same pipeline groups; with pipeline stages
    that holds for any expert TP only when ``pp`` is last in the order (a stage is then one block of ranks, which each
    generator splits its own way). The controller needs a replica's stages on consecutive ranks instead, so megatron-core
    is given the pp-last order and every group it builds is mapped to the processes: the attention groups (TP, CP, DP,
    PP, model-parallel) come out exactly as with the ``tp-cp-pp-dp`` order, and within a stage its ranks, in rank order,
    are split expert TP first, then EP, then expert-DP. (With expert TP = TP x CP that is megatron-core's own
    ``tp-cp-pp-ep-dp`` layout: an EP group joins the same stage of EP neighbouring replicas.)"""
    plain = mpu.RankGenerator
    if pp == 1:
        yield
        return

    class Renumbered(plain):
        def get_ranks(self, token):
            return [[stage_major_rank(v, inner, dp, pp) for v in group] for group in super().get_ranks(token)]

    mpu.RankGenerator = Renumbered
    try:
        yield
    finally:
        mpu.RankGenerator = plain


def current() -> Topology:
    from megatron.core import parallel_state as mpu

    rank, world = dist.get_rank(), dist.get_world_size()
    return Topology(
        tp=mpu.get_tensor_model_parallel_world_size(),
        pp=mpu.get_pipeline_model_parallel_world_size(),
        dp=mpu.get_data_parallel_world_size(),
        tp_rank=mpu.get_tensor_model_parallel_rank(),
        pp_rank=mpu.get_pipeline_model_parallel_rank(),
        dp_rank=mpu.get_data_parallel_rank(),
        rank=rank,
        world=world,
        cp=mpu.get_context_parallel_world_size(),
        cp_rank=mpu.get_context_parallel_rank(),
        ep=mpu.get_expert_model_parallel_world_size(),
        ep_rank=mpu.get_expert_model_parallel_rank(),
        etp=mpu.get_expert_tensor_parallel_world_size(),
        etp_rank=mpu.get_expert_tensor_parallel_rank(),
    )


def release() -> None:
    """One engine fewer; the last one tears the parallel state (and a group :func:`acquire` made) down."""
    from megatron.core import parallel_state as mpu

    _STATE["users"] = max(0, _STATE["users"] - 1)
    if _STATE["users"]:
        return
    mpu.destroy_model_parallel()
    _STATE["sizes"] = None
    if _STATE["own_group"] and dist.is_initialized():
        dist.destroy_process_group()
        _STATE["own_group"] = False


def tp_group():
    from megatron.core import parallel_state as mpu

    return mpu.get_tensor_model_parallel_group()


def pp_group():
    from megatron.core import parallel_state as mpu

    return mpu.get_pipeline_model_parallel_group()


def dp_group():
    from megatron.core import parallel_state as mpu

    return mpu.get_data_parallel_group()


def grad_group():
    """The ranks whose gradients are summed after a mini-batch: data-parallel replicas x the CP ranks of a replica
    (each CP rank's gradient covers its own columns of the sequences)."""
    from megatron.core import parallel_state as mpu

    return mpu.get_data_parallel_group(with_context_parallel=True)


def tp_cp_group():
    """The TP x CP ranks of a replica's stage: together they hold one stage's share of each sequence's tokens."""
    from megatron.core import parallel_state as mpu

    return mpu.get_tensor_and_context_parallel_group()


def ep_group():
    from megatron.core import parallel_state as mpu

    return mpu.get_expert_model_parallel_group()


def etp_group():
    from megatron.core import parallel_state as mpu

    return mpu.get_expert_tensor_parallel_group()


def expert_dp_group():
    """The ranks that hold the same experts (gradients of expert weights are summed over them)."""
    from megatron.core import parallel_state as mpu

    return mpu.get_expert_data_parallel_group()


def expert_mp_group():
    """The expert TP x EP x PP ranks that together hold one copy of every routed expert."""
    from megatron.core import parallel_state as mpu

    return mpu.get_expert_tensor_model_pipeline_parallel_group()


def mp_group():
    """The TP x PP ranks of this model replica."""
    from megatron.core import parallel_state as mpu

    return mpu.get_model_parallel_group()


_OPS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}


def all_reduce(value: torch.Tensor, op: str = "sum", group=None) -> torch.Tensor:
    """A reduced copy of ``value`` over ``group`` (default: every rank); ``avg`` divides by its size."""
    out = value.detach().clone()
    if dist.get_world_size(group) == 1:
        return out
    dist.all_reduce(out, op=_OPS["sum" if op == "avg" else op], group=group)
    if op == "avg":
        out = out / dist.get_world_size(group)
    return out


def barrier() -> None:
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()
