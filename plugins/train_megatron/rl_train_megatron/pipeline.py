"""Point-to-point plumbing between pipeline stages (one model replica's PP group): the reference loop.

Training steps of dense models with PP > 1 go through megatron-core's 1F1B schedule instead
(:mod:`rl_train_megatron.core_pipeline`); this loop runs the forward-only passes, virtual stages, MoE models and the
layouts the schedule path does not take (``MegatronBackend.core_pipeline_problem`` says which).
It runs one micro-batch at a time through the stages (forward on
stage 0, 1, ..., the loss on the last stage, then backward from the last
stage to the first): no overlap between stages, which is plain and the same
on gloo and NCCL; megatron-core's 1F1B schedule would overlap them. Hidden
states and their gradients travel as float32 ``[s, b, h]`` tensors; results
of the last stage (log-probs, values, metrics) are broadcast to every stage
so all ranks of a replica return the same thing.

Virtual (interleaved) pipeline stages (``vpp`` model chunks per stage): a micro-batch goes through chunk 0 of stage
0, 1, ..., then chunk 1 of stage 0, 1, ... (virtual stage ``v x PP + p``), so the last stage sends on to the first
stage; backward goes the same way in reverse. Still one virtual stage at a time: the result is the same as without
virtual stages (megatron-core's interleaved schedule would overlap them to shrink the pipeline bubble).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist


class Pipe:
    def __init__(self, group, pp: int, pp_rank: int, vpp: int = 1) -> None:
        self.group, self.pp, self.stage, self.vpp = group, pp, pp_rank, vpp
        # the neighbours (wrapping around: with virtual stages the last stage's chunk v feeds the first stage's chunk v + 1)
        self.prev = dist.get_global_rank(group, (pp_rank - 1) % pp) if pp > 1 else None
        self.next = dist.get_global_rank(group, (pp_rank + 1) % pp) if pp > 1 else None
        self.last = dist.get_global_rank(group, pp - 1) if pp > 1 else None

    def receives(self, chunk: int) -> bool:
        """Whether this stage's model chunk ``chunk`` takes its input from the previous virtual stage (not the tokens)."""
        return not (self.stage == 0 and chunk == 0)

    def sends(self, chunk: int) -> bool:
        """Whether this stage's model chunk ``chunk`` hands its output on (it is not the model's last virtual stage)."""
        return not (self.stage == self.pp - 1 and chunk == self.vpp - 1)

    @property
    def is_first(self) -> bool:
        return self.stage == 0

    @property
    def is_last(self) -> bool:
        return self.stage == self.pp - 1

    def recv_forward(self, shape: tuple[int, ...], device: torch.device) -> torch.Tensor:
        t = torch.empty(shape, dtype=torch.float32, device=device)
        dist.recv(t, self.prev)
        return t.requires_grad_(torch.is_grad_enabled())

    def send_forward(self, hidden: torch.Tensor) -> None:
        dist.send(hidden.detach().float().contiguous(), self.next)

    def recv_backward(self, hidden: torch.Tensor) -> torch.Tensor:
        g = torch.empty(hidden.shape, dtype=torch.float32, device=hidden.device)
        dist.recv(g, self.next)
        return g.to(hidden.dtype)

    def send_backward(self, grad: torch.Tensor) -> None:
        dist.send(grad.float().contiguous(), self.prev)

    def from_last(self, tensor: torch.Tensor | None, shape: tuple[int, ...], device: torch.device) -> torch.Tensor:
        """The last stage's float32 ``tensor`` on every stage."""
        if self.pp == 1:
            return tensor
        t = tensor.detach().float().contiguous() if self.is_last else torch.empty(shape, dtype=torch.float32, device=device)
        dist.broadcast(t, self.last, group=self.group)
        return t

    def object_from_last(self, obj: Any) -> Any:
        if self.pp == 1:
            return obj
        box = [obj if self.is_last else None]
        dist.broadcast_object_list(box, src=self.last, group=self.group)
        return box[0]
