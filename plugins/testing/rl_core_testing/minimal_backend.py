"""A minimal train backend: one process, plain PyTorch, the whole :class:`TrainBackend` contract in one file.

The worked example of docs/plugins.md; it passes the train conformance suite
(plugins/testing/tests/test_kit_minimal_backend.py). A card would register it as::

    TrainCard(name="minimal", factory="rl_core_testing.minimal_backend:MinimalBackend", roles={"actor", "critic", "ref"})

Core's :class:`~rl_core.train_engine.engine.RoleEngine` does everything else:
epochs, mini- and micro-batches, loss weighting, zero-advantage rows, the LR
schedule, the numerical guard and the metrics.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import torch
from rl_core.checkpoints import copy_state, load_rng_state, safe_load, save_rng_state, save_tensors
from rl_core.modeling import forward_values
from rl_core.train_engine.backend import Heads, TrainBackend, build_adamw, load_role_model
from rl_core.train_engine.hf_export import write_hf_folder


class MinimalBackend(TrainBackend):
    name = "minimal"

    def __init__(self, role: str, config: Any, context) -> None:
        super().__init__(role, config, context)  # role check, device, dtype, defaults for the declared members
        if context.world_size > 1:
            raise ValueError(f"the {self.name} train backend runs in one process; got world_size={context.world_size}")
        model, _key = load_role_model(role, config, torch.float32 if self.trainable else self.compute_dtype)
        self.hf_config, self.hf_class = model.config, type(model)
        if not self.trainable:
            model.requires_grad_(False)
        self.model = model.to(self.device).eval()
        self.rank, self.world_size = 0, 1
        self.sharded = False  # no collectives: ranks never need to run the same number of forwards
        self.uneven_micro_batches = True
        mixed = self.trainable and self.compute_dtype != torch.float32
        self.autocast_dtype = self.compute_dtype if mixed else None  # float32 weights, low-precision compute
        if self.trainable:
            self.optimizer = build_adamw(self.model, config, role)

    # -------------------------------------------------------------- the update's primitives
    def forward(self, x: dict[str, torch.Tensor], *, temperature: float, with_entropy: bool, entropy_grad: bool, training: bool) -> Heads:
        R = x["responses"].shape[1]
        if self.role == "critic":
            return Heads(values=forward_values(self.model, x["input_ids"], x["attention_mask"], x["position_ids"], R))
        out = self.model(input_ids=x["input_ids"], attention_mask=x["attention_mask"], position_ids=x["position_ids"])
        logits = out.logits[:, -R - 1 : -1].float() / temperature  # the logits that predict each response token
        log_p = torch.log_softmax(logits, dim=-1)
        log_probs = log_p.gather(-1, x["responses"].unsqueeze(-1)).squeeze(-1)
        entropy = None
        if with_entropy:
            with torch.set_grad_enabled(torch.is_grad_enabled() and entropy_grad):
                entropy = -(log_p.exp() * log_p).sum(-1)
        return Heads(log_probs=log_probs, entropy=entropy)

    def backward(self, loss: torch.Tensor | None, weight: float) -> None:
        (loss * weight).backward()  # one process: the weighted sum over micro-batches is the mini-batch's loss

    def reduce_and_clip(self, max_norm: float | None) -> float:
        limit = float(max_norm) if max_norm else float("inf")  # nothing to reduce in one process
        return float(torch.nn.utils.clip_grad_norm_([p for p in self.model.parameters() if p.grad is not None], limit))

    def all_reduce(self, value: torch.Tensor, op: str, over: str = "data") -> torch.Tensor:
        return value  # one rank

    # -------------------------------------------------------------- weights and state
    def named_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        seen: set[int] = set()
        for name, t in self.model.state_dict(keep_vars=True).items():
            if id(t) not in seen:  # tied weights once, under the first name (HF convention)
                seen.add(id(t))
                yield name, t.detach()

    def save_hf(self, path: str) -> None:
        write_hf_folder(Path(path), self.named_weights(), self.hf_config, self.hf_class, getattr(self.model, "generation_config", None), self.config)

    def save_checkpoint(self, path: str, scheduler: dict[str, Any] | None) -> None:
        root = Path(path)
        root.mkdir(parents=True, exist_ok=True)
        state = {"model": self.model.state_dict(), "rng": save_rng_state(), "scheduler": scheduler}
        if self.optimizer is not None:
            state["optim"] = self.optimizer.state_dict()
        save_tensors(state, str(root / "state.pt"))  # plain tensors and data: loads with weights_only=True

    def load_checkpoint(self, path: str) -> dict[str, Any] | None:
        file = Path(path) / "state.pt"
        if not file.is_file():
            raise FileNotFoundError(f"{self.role}: no {self.name} checkpoint at {str(path)!r} (expected {str(file)!r})")
        state = safe_load(str(file))
        self.model.load_state_dict(state["model"])
        if self.optimizer is not None:
            self.optimizer.load_state_dict(state["optim"])
        load_rng_state(state["rng"])
        return state["scheduler"]

    def local_state_dict(self) -> dict[str, Any]:
        """Model and optimizer state (copies), for the conformance suite's resume check."""
        out: dict[str, Any] = {"model": {n: t.detach().clone() for n, t in self.model.state_dict().items()}}
        if self.optimizer is not None:
            out["optim"] = copy_state(self.optimizer.state_dict())
        return out

