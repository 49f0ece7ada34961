"""Megatron shards -> HF-named tensors (weight sync, export; the folder itself: rl_core.train_engine.hf_export).

:func:`gather_hf_weights` walks this rank's parameters in order, packs them
into flat buckets of about ``bucket_bytes``, all-gathers each bucket over the
TP group (one collective per bucket, not per tensor), re-assembles the whole
Megatron tensors (:func:`rl_train_megatron.convert.merge_tp`) and yields them
under HF names (:func:`rl_train_megatron.convert.full_to_hf`). Every rank of a
TP group gets every tensor, so each rank's rollout engine can load them.

MoE: a bucket's routed-expert tensors (this rank's ``E / EP`` experts, sliced by expert TP: 1 or TP) are merged over
TP when the expert TP is TP, then all-gathered over the expert-parallel group (one more collective per bucket that
holds experts) and renamed to their global expert numbers; HF's stacked ``gate_up_proj`` / ``down_proj`` of a layer
come out when its last expert has come by (:class:`rl_train_megatron.convert.ExpertStacker`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import torch
import torch.distributed as dist
from rl_core.train_engine.hf_export import write_hf_folder

from rl_train_megatron import convert, fully_sharded, parallel
from rl_train_megatron.model import ModelShape


def stage_layout(params: list[tuple[str, torch.Tensor]], pp_group) -> list[list[tuple[str, tuple[int, ...], torch.dtype]]]:
    """Every pipeline stage's ``(global name, local shape, dtype)`` list, in stage order (one object all-gather)."""
    mine = [(name, tuple(t.shape), t.dtype) for name, t in params]
    if pp_group is None or dist.get_world_size(pp_group) == 1:
        return [mine]
    out: list = [None] * dist.get_world_size(pp_group)
    dist.all_gather_object(out, mine, group=pp_group)
    return out


def gather_hf_weights(
    params: list[tuple[str, torch.Tensor]],
    shape: ModelShape,
    tp_group,
    *,
    pp_group=None,
    layout: list | None = None,
    bucket_bytes: int = 256 * 2**20,
    ep_group=None,
    etp: int | None = None,
) -> Iterator[tuple[str, torch.Tensor]]:
    """This rank's ``(global Megatron name, local shard)`` pairs -> every stage's whole HF-named tensors.

    Stage by stage (``layout`` from :func:`stage_layout`), in buckets: the
    owning stage broadcasts its shards over the PP group, then the TP group
    all-gathers them; one broadcast and one all-gather per bucket.
    """
    tp = dist.get_world_size(tp_group) if tp_group is not None else 1
    pp = dist.get_world_size(pp_group) if pp_group is not None else 1
    stage = dist.get_rank(pp_group) if pp > 1 else 0
    layout = layout or [[(n, tuple(t.shape), t.dtype) for n, t in params]]
    local = dict(params)
    moe = _Experts(shape, tp if etp is None else etp, ep_group)
    for p, entries in enumerate(layout):
        bucket: list = []
        size = 0
        for entry in entries:
            bucket.append(entry)
            size += _numel(entry[1]) * 4
            if size >= bucket_bytes:
                yield from _flush(bucket, local if p == stage else None, shape, tp, tp_group, pp_group, p, pp, moe)
                bucket, size = [], 0
        if bucket:
            yield from _flush(bucket, local if p == stage else None, shape, tp, tp_group, pp_group, p, pp, moe)
    moe.stacker.check_done()


class _Experts:
    """The routed experts' part of a bucket: TP merge (expert TP = TP) or this rank's copy (expert TP = 1), the
    all-gather over the expert-parallel group, global expert numbers, HF's stacked tensors."""

    def __init__(self, shape: ModelShape, etp: int, ep_group) -> None:
        self.shape, self.etp = shape, etp
        self.ep_group = ep_group
        self.ep = dist.get_world_size(ep_group) if ep_group is not None else 1
        self.stacker = convert.ExpertStacker(shape)

    def merge(self, name: str, shards: list[torch.Tensor], mine: int) -> torch.Tensor:
        return convert.merge_tp(name, shards) if self.etp > 1 else shards[mine]

    def emit(self, experts: list[tuple[str, torch.Tensor, torch.dtype]]) -> Iterator[tuple[str, torch.Tensor]]:
        """``(local name, whole local expert tensor, dtype)`` of this bucket -> HF tensors once a layer is complete."""
        if not experts:
            return
        per = self.shape.experts // self.ep
        parts = [torch.cat([t.reshape(-1).float() for _, t, _ in experts])]
        if self.ep > 1:
            flat = parts[0]
            parts = [torch.empty_like(flat) for _ in range(self.ep)]
            dist.all_gather(parts, flat, group=self.ep_group)
        for r, part in enumerate(parts):
            offset = 0
            for name, t, dtype in experts:
                n = t.numel()
                whole = part[offset : offset + n].view(t.shape).to(dtype)
                offset += n
                yield from convert.full_to_hf(convert.with_expert(name, r * per + convert.expert_index(name)), whole, self.shape, self.stacker)


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _flush(bucket, local, shape: ModelShape, tp: int, tp_group, pp_group, src_stage: int, pp: int, moe: _Experts) -> Iterator[tuple[str, torch.Tensor]]:
    experts: list = []
    if tp == 1 and pp == 1:
        for name, _, dtype in bucket:
            if convert.is_expert(name):
                experts.append((name, local[name].detach(), dtype))
            else:
                yield from convert.full_to_hf(name, local[name].detach(), shape)
        yield from moe.emit(experts)
        return
    if local is not None:
        flat = torch.cat([local[name].detach().reshape(-1).float() for name, _, _ in bucket])
    else:
        flat = torch.empty(sum(_numel(s) for _, s, _ in bucket), dtype=torch.float32, device=_device(pp_group))
    if pp > 1:
        dist.broadcast(flat, dist.get_global_rank(pp_group, src_stage), group=pp_group)
    parts = [flat]
    if tp > 1:
        parts = [torch.empty_like(flat) for _ in range(tp)]
        dist.all_gather(parts, flat, group=tp_group)
    offset = 0
    mine = dist.get_rank(tp_group) if tp > 1 else 0
    for name, shp, dtype in bucket:
        n = _numel(shp)
        shards = [part[offset : offset + n].view(shp) for part in parts]
        offset += n
        if convert.is_expert(name):
            experts.append((name, moe.merge(name, shards, mine), dtype))
        else:
            yield from convert.full_to_hf(name, convert.merge_tp(name, shards).to(dtype), shape)
    yield from moe.emit(experts)


def _device(group) -> torch.device:
    """Where collectives of ``group`` run: CUDA for NCCL, else the CPU."""
    return torch.device("cuda", torch.cuda.current_device()) if dist.get_backend(group) == "nccl" else torch.device("cpu")


class WeightExport:
    """TrainBackend's :meth:`named_weights` and :meth:`save_hf` over the backend's chunks (mixed into
    :class:`rl_train_megatron.engine.MegatronBackend`)."""

    def _global_params(self) -> list[tuple[str, torch.Tensor]]:
        """``(global Megatron name, parameter)`` of every model chunk of this rank (chunk v: virtual stage v x PP + pp_rank)."""
        t, out = self.topo, []
        for v, chunk in enumerate(self.chunks):
            offset = convert.stage_layers(self.shape, t.pp * self.vpp, v * t.pp + t.pp_rank).start
            out += [(convert.global_name(n, offset), p.detach()) for n, p in chunk.named_parameters() if not self._tied_copy(n)]
        return out

    def named_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """Full HF-named float32 tensors on every rank, in buckets: broadcast over PP, all-gathered over TP.

        Every rank must drain it. With TP 1 and PP 1 the tensors that need no
        re-layout are detached views of the parameters (copy them to keep them
        past the next update). With param_offload the parameters are on the device while it is drained.
        """
        if self.param_offload:
            return self._weights_on_device()
        return self._named_weights()

    def _weights_on_device(self) -> Iterator[tuple[str, torch.Tensor]]:
        with self.on_device("weights"):
            yield from self._named_weights()

    def _named_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        bucket_mb = float(self.config.train.options.get("weight_bucket_mb", 256))
        params = self._global_params()
        if self.stage is not None:  # each tensor all-gathered over the data-parallel group as the buckets reach it
            params = fully_sharded.gathered(params)
        if self._stage_layout is None:
            self._stage_layout = stage_layout(params, parallel.pp_group())
        moe = self.shape.moe
        return gather_hf_weights(
            params, self.shape, parallel.tp_group(), pp_group=parallel.pp_group(), layout=self._stage_layout, bucket_bytes=int(bucket_mb * 2**20),
            ep_group=parallel.ep_group() if moe else None, etp=self.topo.etp if moe else None,
        )

    def save_hf(self, path: str) -> None:
        """A normal HF folder at ``path`` (rank 0 writes; every rank must call).

        Streamed: rank 0 hands the weights to the shard writer one at a time as the ranks gather them (the writer
        copies each into its shard at once, so a reused gather buffer is safe; one shard on the host at once, not
        the whole model); the other ranks only take part in the gathers.
        """
        write_hf_folder(Path(path), self.named_weights(), self.hf_config, self.hf_class, self.generation_config, self.config,
                        write=self.rank == 0)
        parallel.barrier()
