"""The train-backend contract: the primitives a train plugin implements (:class:`TrainBackend`); core's
:class:`~rl_core.train_engine.engine.RoleEngine` drives the update. docs/plugins.md ("A train backend") tables the
members; :mod:`rl_core_testing.minimal_backend` (plugins/testing) is the worked example."""

from __future__ import annotations

import abc
import contextlib
from typing import Any, ClassVar, Iterator, Literal

import attrs
import torch

from rl_core.backends import WorkerContext
from rl_core.cards import ROLES
from rl_core.modeling import check_model_path, load_causal_lm, load_value_model, torch_dtype
from rl_core.train_engine import loss_scale
from rl_core.train_engine.batch_sizes import TrainSizeError, role_config
from rl_core.train_engine.loss_scale import LossScaler

Over = Literal["data", "world"]
#: the batch field ``routed_experts``' mark of a token without a recorded routing (padding, the last sampled token): it
#: routes natively (the layout: rl-routing-replay's rl_routing_replay.replay)
NO_ROUTE = -1


@attrs.frozen
class Heads:
    """What :meth:`TrainBackend.forward` returns for ``b`` rows and ``R`` response columns: ``log_probs`` / ``entropy``
    (actor, ref) or ``values`` (critic), ``[b, R]``, padding unmasked; ``routed_experts`` ``[b, S, layers, k]`` int16:
    an MoE actor's routing (``actor.router_replay=R2``), else None."""

    log_probs: torch.Tensor | None = None
    entropy: torch.Tensor | None = None
    values: torch.Tensor | None = None
    routed_experts: torch.Tensor | None = None


class TrainBackend(abc.ABC):
    """One role of a train backend in one worker process. This ``__init__`` sets ``role``, ``config``, ``context``,
    ``device``, ``trainable``, ``compute_dtype`` and defaults; a backend's sets ``model``, ``rank``, ``world_size``,
    ``sharded``, ``uneven_micro_batches``, ``autocast_dtype`` and, when trainable, ``optimizer``."""

    #: the card's name, for messages
    name: ClassVar[str] = "train"

    role: str
    config: Any
    context: WorkerContext
    device: torch.device
    trainable: bool
    compute_dtype: torch.dtype
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer | None
    rank: int
    world_size: int
    #: forwards run collectives across ranks: every rank must run the same number of them
    sharded: bool
    #: ranks may run different numbers of micro-batches in one update (then zero-advantage rows can be skipped)
    uneven_micro_batches: bool
    #: ``torch.autocast`` dtype around forwards (None: no autocast)
    autocast_dtype: torch.dtype | None
    #: ``model.dtype=float16``'s dynamic loss scaling (:mod:`rl_core.train_engine.loss_scale`); None otherwise
    loss_scaler: LossScaler | None

    def __init__(self, role: str, config: Any, context: WorkerContext) -> None:
        if role not in ROLES:
            raise TrainSizeError(f"unknown role {role!r}: the {self.name} train backend provides {', '.join(sorted(ROLES))}")
        self.role = role
        self.config = config
        self.context = context
        self.device = context.torch_device
        self.trainable = role != "ref"
        self.compute_dtype = torch_dtype(config.model.dtype)
        self.optimizer = None
        self.rank, self.world_size = context.rank, context.world_size
        self.sharded = False
        self.uneven_micro_batches = True
        self.autocast_dtype = None
        self.loss_scaler = loss_scale.for_backend(self.trainable, config.model.dtype)

    # ------------------------------------------------------------ primitives
    @abc.abstractmethod
    def forward(self, x: dict[str, torch.Tensor], *, temperature: float, with_entropy: bool, entropy_grad: bool, training: bool) -> Heads | None:
        """The micro-batch ``x`` through the model: :class:`Heads` in float32. While ``training`` a pipelined backend may
        return None on stages without the heads (then ``backward(None, weight)``); inference returns heads on every rank."""

    @abc.abstractmethod
    def backward(self, loss: torch.Tensor | None, weight: float) -> None:
        """Back-propagate ``loss * weight`` of the last :meth:`forward` (``loss`` None: a stage without the heads); ``weight``
        is the micro-batch's share of the global mini-batch."""

    def runs_micro_batches(self) -> bool:
        """Whether the update hands this backend a whole mini-batch (:meth:`run_micro_batches`: its own schedule, e.g.
        megatron-core's pipeline) instead of calling :meth:`forward` / :meth:`backward` per micro-batch."""
        return False

    def run_micro_batches(self, items, loss_of, *, temperature: float, with_entropy: bool, entropy_grad: bool) -> None:
        """A mini-batch's micro-batches ``(x, rows, real)`` forward and backward in the backend's own order:
        ``loss_of(x, rows, real, heads) -> (loss, weight)`` on the ranks with the heads, then ``loss * weight``
        back-propagated (gradients accumulated as per-micro-batch :meth:`backward` calls would)."""
        raise NotImplementedError(f"{type(self).__name__} runs micro-batches through forward / backward")

    @abc.abstractmethod
    def reduce_and_clip(self, max_norm: float | None) -> float:
        """Sum gradients over data-parallel ranks, clip them to ``max_norm`` (> 0; None or 0: no clipping);
        the global L2 norm before clipping, the same on every rank."""

    @abc.abstractmethod
    def all_reduce(self, value: torch.Tensor, op: str, over: Over = "data") -> torch.Tensor:
        """A reduced copy of ``value`` (``sum``, ``max``, ``min`` or ``avg``) over the data-parallel ranks or every
        rank; ``value`` itself without a process group."""

    def step(self) -> None:
        """The optimizer step, then clear the gradients."""
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def zero_grad(self) -> None:
        """Clear the gradients before a mini-batch's first backward (default: the optimizer's)."""
        self.optimizer.zero_grad(set_to_none=True)

    def unscale_grads(self, factor: float) -> None:
        """Multiply every gradient the optimizer steps on by ``factor`` (float16's loss scaling: ``1 / scale``, after
        :meth:`reduce_and_clip`). Default: the gradients of ``model``'s parameters."""
        for p in self.model.parameters():
            if p.grad is not None:
                p.grad.mul_(factor)

    def step_metrics(self) -> dict[str, float]:
        """Metrics of the mini-batch just reduced (called on every rank after :meth:`reduce_and_clip`; the same
        values on every rank), e.g. a MoE model's router losses. Default: none."""
        return {}

    def from_heads_stage(self, obj: Any) -> Any:
        """``obj`` as the ranks holding the heads have it (pipelined backends broadcast it); identity by default."""
        return obj

    @abc.abstractmethod
    def named_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """Full HF-named tensors, identical on every rank (every rank must drain it)."""

    def named_base_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """LoRA: the frozen base weights (HF names, adapters not folded in; every rank must drain it), sent once to a
        rollout engine that applies the adapters itself (``rollout.lora_sync=adapter``). Backends without LoRA raise."""
        raise NotImplementedError(f"the {self.name} train backend has no LoRA base weights to send (rollout.lora_sync=adapter): "
                                  "use a train backend whose card declares lora, or set model.lora_rank=0")

    def lora_adapter(self, dtype: torch.dtype | None = None) -> tuple[dict[str, torch.Tensor], dict] | None:
        """LoRA: ``(tensors, peft_config)`` of the live adapters in ``dtype`` (None: float32) as rollout engines' LoRA
        APIs take them (every rank must call); None without adapters (the default)."""
        return None

    def sample_weights(self, positions: dict[str, torch.Tensor]) -> dict[str, torch.Tensor] | None:
        """The trained policy's weights at flat ``positions`` (HF name -> indices), computed apart from :meth:`named_weights`
        (:mod:`rl_core.weight_sync_check`); None: no such view, nothing compared."""
        return None

    def local_state_dict(self) -> dict[str, Any] | None:
        """This rank's model (``"model"``) and optimizer (``"optim"``) state as plain tensors (copies), for tests: two
        backends with equal states on every rank are in the same training state. None (the default): not provided."""
        return None

    @abc.abstractmethod
    def save_hf(self, path: str) -> None:
        """A normal HF folder at ``path`` (rank 0 writes; every rank must call)."""

    @abc.abstractmethod
    def save_checkpoint(self, path: str, scheduler: dict[str, Any] | None) -> None:
        """Model, optimizer and RNG state under ``path``, with core's LR-scheduler state ``scheduler`` (plain data)."""

    @abc.abstractmethod
    def load_checkpoint(self, path: str) -> dict[str, Any] | None:
        """Restore :meth:`save_checkpoint`'s state; returns the scheduler state it was given."""

    def reference_policy(self):
        """A context in which :meth:`forward` computes the reference policy from this role's model (LoRA: the
        same model with its adapters off), so no second copy is loaded. Backends without it raise."""
        raise NotImplementedError(f"the {self.name} train backend cannot compute the reference policy from the actor's model")

    def on_device(self, phase: str):
        """A context around one phase (``"infer"``, ``"update"``): offloaded weights / optimizer state are brought
        to the device on entry and sent back on exit (``actor.fsdp_config.*_offload``); nothing by default."""
        return contextlib.nullcontext()

    def release(self) -> None:
        """Free what the backend holds besides the model and optimizer (process groups, ...)."""


# ------------------------------------------------------------------ helpers for backends
def load_role_model(role: str, config: Any, dtype: torch.dtype) -> tuple[torch.nn.Module, str]:
    """``(the role's HF model on the CPU, the config key of its path)``: a causal LM from ``model.path`` (actor, ref) or
    the backbone with a value head from ``critic.model_path`` (default: the actor's)."""
    mcfg = config.model
    if role == "critic":
        path, key = (config.critic.model_path or mcfg.path), ("critic.model_path" if config.critic.model_path else "model.path")
    else:
        path, key = mcfg.path, "model.path"
    check_model_path(path, key=key)  # random_init too: the config must be there
    loader = load_value_model if role == "critic" else load_causal_lm
    model = loader(
        path, dtype=dtype, device="cpu", random_init=mcfg.random_init, override_config=mcfg.override_config,
        trust_remote_code=mcfg.trust_remote_code, seed=config.trainer.seed, key=key, init_device=config.trainer.device,
    )
    return model, key


def build_adamw(model: torch.nn.Module, config: Any, role: str, **adamw: Any) -> torch.optim.AdamW:
    """``torch.optim.AdamW`` over the trainable parameters with the role's ``optim`` settings (``adamw``: more kwargs)."""
    ocfg = role_config(config, role).optim
    return torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad],
        lr=ocfg.lr, betas=tuple(ocfg.betas), eps=ocfg.eps, weight_decay=ocfg.weight_decay, **adamw,
    )
