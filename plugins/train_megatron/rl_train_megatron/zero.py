"""The distributed optimizer (``train.distributed_optimizer``; Megatron's ``use_distributed_optimizer``): AdamW's state
sharded over the ranks that hold the same parameters (ZeRO stage 1).

megatron-core 0.16.1's ``DistributedOptimizer`` takes only ``torch.cuda`` parameters and its gradient buffers use CUDA
streams, so the engine shards the state itself, with the same result as the plain optimizer:

- the ranks that hold a copy of a parameter are its *replica group*: the data-parallel (x CP) ranks of the same
  TP / PP shard for dense weights (:func:`rl_train_megatron.parallel.grad_group`), the expert-data-parallel ranks for
  routed experts (:func:`rl_train_megatron.parallel.expert_dp_group`);
- each parameter is *owned* by one rank of its group (whole tensors, dealt greedily by size in parameter order:
  the same deal on every rank); the rank's AdamW holds and steps only the parameters it owns, so its state is about
  ``1 / group size`` of the plain optimizer's;
- gradients are already summed over the group before the step (the engine's all-reduce), so an owner's update is the
  plain optimizer's update of that parameter, element for element; after the step each owner broadcasts its
  parameters (one flat buffer per owner) to the group.

Each rank checkpoints its own AdamW state; the deal depends only on the parameters and the group size, so a resume with
the same layout gets every state back on its owner.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.distributed as dist


class OwnedParameters:
    """A stand-in for a module whose ``parameters()`` are this rank's owned ones (what ``build_adamw`` reads)."""

    def __init__(self, params: list[torch.nn.Parameter]) -> None:
        self._params = params

    def parameters(self):
        return iter(self._params)


def deal(sizes: list[int], ranks: int) -> list[int]:
    """The owner (0 .. ranks-1) of each of the tensors of ``sizes``: the least loaded rank so far, lowest first on ties."""
    load = [0] * ranks
    owners = []
    for n in sizes:
        r = min(range(ranks), key=lambda i: (load[i], i))
        owners.append(r)
        load[r] += n
    return owners


class ShardedState:
    """Which of this rank's trainable parameters it owns, and the broadcast after each step."""

    def __init__(self, named: list[tuple[str, torch.nn.Parameter]], group_of: Callable[[str], object]) -> None:
        self.groups: list[tuple[object, list[list[torch.nn.Parameter]]]] = []  # (group, params of each group rank)
        self.owned: list[torch.nn.Parameter] = []
        by_group: dict[int, tuple[object, list[torch.nn.Parameter]]] = {}
        for name, p in named:
            g = group_of(name)
            by_group.setdefault(id(g), (g, []))[1].append(p)
        for group, params in by_group.values():
            size = dist.get_world_size(group) if group is not None else 1
            me = dist.get_rank(group) if group is not None else 0
            per_rank: list[list[torch.nn.Parameter]] = [[] for _ in range(size)]
            for p, owner in zip(params, deal([p.numel() for p in params], size)):
                per_rank[owner].append(p)
            self.owned += per_rank[me]
            if size > 1:
                self.groups.append((group, per_rank))

    def broadcast(self) -> None:
        """Every owner's parameters (after its step) to the other ranks of their group: one flat buffer per owner."""
        from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

        for group, per_rank in self.groups:
            for r, params in enumerate(per_rank):
                if not params:
                    continue
                flat = _flatten_dense_tensors([p.data for p in params])
                dist.broadcast(flat, dist.get_global_rank(group, r), group=group)
                for p, new in zip(params, _unflatten_dense_tensors(flat, [p.data for p in params])):
                    p.data.copy_(new)
