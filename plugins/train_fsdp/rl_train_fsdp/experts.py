"""Expert parallelism for transformers' MoE blocks (``train.expert_model_parallel_size``; verl's veomni / fsdp_turbo
``expert_parallel_size``).

transformers keeps an MoE layer's experts as two 3-D parameters of one module (``gate_up_proj [E, 2I, H]``,
``down_proj [E, H, I]``; Qwen2-MoE, Qwen3-MoE, Mixtral, ...) called as ``experts(hidden [T, H], top_k_index [T, k],
top_k_weights [T, k])``. With EP = e > 1 the ranks form groups of e consecutive ranks; in each group rank j holds
experts ``[j E/e, (j+1) E/e)`` of every MoE layer, as a DTensor on an (expert-data-parallel x EP) mesh
(``Replicate(), Shard(0)``): the experts are kept out of FSDP (``ignored_params``), everything else is sharded by FSDP
as before. In the forward each (token, choice) row is sent to the rank of its expert by an all-to-all, computed
there, and sent back (autograd all-to-all both ways); the router, the weighting and the shared expert stay
the model's own code.

Gradients: the backward multiplies each rank's loss by the world size (FSDP averages); an expert's gradient holds the
contributions of its EP group's tokens, so it is summed over the expert-data-parallel ranks and divided by the world
size (:meth:`ExpertParallel.reduce_grads`) to be the global loss's gradient, as the FSDP parameters'. The gradient
norm counts every expert once (:meth:`ExpertParallel.grad_norm_sq`). ``named_weights`` / ``save_hf`` gather the experts
(DTensor ``full_tensor``), DCP checkpoints store them by their global shape.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
import torch.distributed as dist

#: the keyword names of transformers' experts forward this module replaces
FORWARD_ARGS = ("hidden_states", "top_k_index", "top_k_weights")


def expert_modules(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """The modules holding an MoE layer's experts as 3-D ``gate_up_proj`` / ``down_proj`` parameters."""
    out = []
    for name, m in model.named_modules():
        gu, down = getattr(m, "gate_up_proj", None), getattr(m, "down_proj", None)
        if isinstance(gu, torch.nn.Parameter) and isinstance(down, torch.nn.Parameter) and gu.dim() == 3 and down.dim() == 3 \
                and isinstance(getattr(m, "num_experts", None), int):
            out.append((name, m))
    return out


class _AllToAll(torch.autograd.Function):
    """``dist.all_to_all_single`` with its transpose as the backward."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, out_splits: list[int], in_splits: list[int], group) -> torch.Tensor:
        ctx.splits, ctx.group = (out_splits, in_splits), group
        out = x.new_empty((sum(out_splits), *x.shape[1:]))
        dist.all_to_all_single(out, x.contiguous(), out_splits, in_splits, group=group)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        out_splits, in_splits = ctx.splits
        back = grad.new_empty((sum(in_splits), *grad.shape[1:]))
        dist.all_to_all_single(back, grad.contiguous(), in_splits, out_splits, group=ctx.group)
        return back, None, None, None


class ExpertParallel:
    """The EP layout of one engine: groups, mesh, the sharded expert parameters."""

    def __init__(self, ep: int, device: torch.device, host: bool = False) -> None:
        from torch.distributed.device_mesh import init_device_mesh

        world, rank = dist.get_world_size(), dist.get_rank()
        if world % ep:
            raise ValueError(f"train.expert_model_parallel_size={ep} does not divide the {world} ranks")
        self.ep, self.world = ep, world
        self.mesh = init_device_mesh(device.type, (world // ep, ep), mesh_dim_names=("edp", "ep"))
        self.group, self.dp_group = self.mesh.get_group("ep"), self.mesh.get_group("edp")
        self.ep_rank = rank % ep
        self.device = device
        # host offload (FSDP2's CPUOffloadPolicy for the rest): the experts, their gradients and AdamW state live in host
        # memory and are copied to the device for the layer's compute, as CPUOffloadPolicy does with FSDP's shards
        self.host = host
        self.params: list[torch.nn.Parameter] = []

    def shard(self, model: torch.nn.Module) -> set[torch.nn.Parameter]:
        """Keep this rank's experts of every MoE layer (DTensors) and route its forward; returns the expert parameters."""
        from torch.distributed.tensor import DTensor, Replicate, Shard

        found = expert_modules(model)
        if not found:
            raise ValueError(f"train.expert_model_parallel_size={self.ep}: the {getattr(model.config, 'model_type', type(model).__name__)} "
                             "model has no MoE experts (3-D gate_up_proj / down_proj) to spread over ranks; set it to 1")
        for name, m in found:
            names = tuple(inspect.signature(m.forward).parameters)
            if names[:3] != FORWARD_ARGS:
                raise ValueError(f"train.expert_model_parallel_size: {name} ({type(m).__name__}) is called with {names}, not {FORWARD_ARGS}: "
                                 "an experts module rl-core's expert parallelism does not know; set it to 1")
            if m.num_experts % self.ep:
                raise ValueError(f"train.expert_model_parallel_size={self.ep} does not divide the {m.num_experts} experts of {name}; "
                                 f"choose a divisor of {m.num_experts}")
            per = m.num_experts // self.ep
            for attr in ("gate_up_proj", "down_proj"):
                full = getattr(m, attr)
                local = full.detach()[self.ep_rank * per:(self.ep_rank + 1) * per].clone()
                local = local.to("cpu").pin_memory() if self.host and device_is_cuda(self.device) else local.to("cpu" if self.host else self.device)
                dt = DTensor.from_local(local, self.mesh, [Replicate(), Shard(0)], run_check=False)
                p = torch.nn.Parameter(dt, requires_grad=full.requires_grad)
                setattr(m, attr, p)
                self.params.append(p)
            m.forward = _routed_forward(m, self, per)
        return set(self.params)

    def reduce_grads(self) -> None:
        """Each expert's gradient: summed over the expert-data-parallel ranks, divided by the world size."""
        for p in self.params:
            if p.requires_grad:
                if p.grad is None:  # no token of this EP group chose these experts: a zero gradient (the whole layer's tensor has one)
                    p.grad = torch.zeros_like(p)
                g = p.grad.to_local()
                if self.world > self.ep:
                    on = g.to(self.device)  # host-offloaded gradients are reduced on the device (NCCL)
                    dist.all_reduce(on, group=self.dp_group)
                    if on is not g:
                        g.copy_(on)
                g.div_(self.world)

    def grad_norm_sq(self) -> torch.Tensor:
        """The squared L2 norm of all experts' gradients (each expert once: summed over the EP group)."""
        total = torch.zeros((), dtype=torch.float32, device=self.device)
        for p in self.params:
            if p.grad is not None:
                total = total + p.grad.to_local().detach().float().pow(2).sum().to(self.device)
        dist.all_reduce(total, group=self.group)
        return total.cpu()


def device_is_cuda(device: torch.device) -> bool:
    return torch.device(device).type == "cuda"


def _routed_forward(m: torch.nn.Module, ep: ExpertParallel, per: int):
    def forward(hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor) -> torch.Tensor:
        return routed_experts(m, ep, per, hidden_states, top_k_index, top_k_weights)

    return forward


def routed_experts(m: Any, ep: ExpertParallel, per: int, hidden: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor) -> torch.Tensor:
    """The MoE layer's expert output for this rank's tokens, the experts computed on their owners' ranks."""
    w1 = m.gate_up_proj.to_local().to(hidden.device, hidden.dtype)  # host offload: copied to the device for the layer
    w2 = m.down_proj.to_local().to(hidden.device, hidden.dtype)
    k = top_k_index.shape[1]
    flat = top_k_index.reshape(-1)
    order = torch.argsort(flat, stable=True)  # (token, choice) rows by expert, so by owner rank
    token = order // k
    experts = flat[order]
    send = torch.bincount(experts // per, minlength=ep.ep)
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=ep.group)
    send_l, recv_l = send.tolist(), recv.tolist()
    x = _AllToAll.apply(hidden[token], recv_l, send_l, ep.group)
    got = experts.new_empty(sum(recv_l))
    dist.all_to_all_single(got, experts.contiguous(), recv_l, send_l, group=ep.group)
    local = got - ep.ep_rank * per
    y = x.new_zeros(x.shape)
    for j in range(per):
        rows = (local == j).nonzero().squeeze(1)
        if rows.numel() == 0:
            continue
        gate, up = torch.nn.functional.linear(x[rows], w1[j]).chunk(2, dim=-1)
        y = y.index_add(0, rows, torch.nn.functional.linear(m.act_fn(gate) * up, w2[j]))
    back = _AllToAll.apply(y, send_l, recv_l, ep.group)
    weights = top_k_weights.reshape(-1)[order]
    out = torch.zeros_like(hidden)
    return out.index_add(0, token, (back * weights[:, None]).to(out.dtype))
