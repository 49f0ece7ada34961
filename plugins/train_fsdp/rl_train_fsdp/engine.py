"""The FSDP2 train engine: one role (actor, critic or ref) of one worker process.

:class:`FSDPBackend` is the ``fsdp`` card's factory: the primitives of
:class:`rl_core.train_engine.backend.TrainBackend`, which core drives
(:class:`rl_core.train_engine.engine.RoleEngine`). ``build_engine(role, config,
context)`` builds both, for benches and tests.

Models
    actor / ref: ``AutoModelForCausalLM``; critic: the LM backbone plus a
    scalar value head (``AutoModelForTokenClassification`` with
    ``num_labels=1``, see :func:`rl_core.modeling.load_value_model`), from
    ``critic.model_path`` (default: the actor's). Sharded with FSDP2 when a
    process group exists (:mod:`rl_train_fsdp.sharding`), a plain module
    otherwise.

Precision
    ``model.dtype == "float32"``: everything in float32. ``"bfloat16"`` /
    ``"float16"``: actor and critic keep float32 parameters and optimizer
    state and compute in the low precision (FSDP2 ``MixedPrecisionPolicy``
    when sharded, ``torch.autocast`` when not; float16 with core's dynamic loss
    scaling, rl_core.train_engine.loss_scale);
    the reference model, which never trains, is loaded in that dtype
    directly. Log-probs, entropies, values and losses are float32.

Update, inference loops, LR schedule
    core's (:mod:`rl_core.train_engine.update`: mini- / micro-batches, epochs,
    loss weighting over the global mini-batch, zero-advantage rows skipped when
    unsharded, the numerical guard); this class adds the FSDP2 model, its
    forwards (shared-prompt and chunked LM head, :mod:`rl_core.logprobs`), the
    backward (FSDP2's gradient averaging undone), ``clip_grad_norm_`` over the
    shards, full-tensor weights and DCP checkpoints.
"""

from __future__ import annotations

from typing import Any

import torch
from rl_core.backends import WorkerContext
from rl_core.train_engine.backend import TrainBackend, build_adamw, load_role_model
from rl_core.train_engine.engine import RoleEngine
from rl_train_fsdp import packing

from rl_train_fsdp import activations, checkpointing, offload, sharding, ulysses
from rl_train_fsdp.compile import compile_decoder_layers
from rl_train_fsdp.forward import Forwards
from rl_train_fsdp.lora import LoraMembers
from rl_train_fsdp.weights import WeightExport


def build_engine(role: str, config, context: WorkerContext, **kwargs: Any) -> RoleEngine:
    """The role's engine (core's driver over :class:`FSDPBackend`), for benches and tests; ``kwargs``: RoleEngine's."""
    return RoleEngine(FSDPBackend(role, config, context), **kwargs)


class FSDPBackend(Forwards, LoraMembers, WeightExport, offload.Offload, TrainBackend):
    """The ``fsdp`` card's factory; its forwards, LoRA members, weight export and offload are mixed in from
    :mod:`rl_train_fsdp.forward`, :mod:`~rl_train_fsdp.lora`, :mod:`~rl_train_fsdp.weights` and :mod:`~rl_train_fsdp.offload`."""

    name = "fsdp"

    def __init__(self, role: str, config, context: WorkerContext) -> None:
        super().__init__(role, config, context)
        self.rank, self.world_size = sharding.rank_and_world()
        if context.world_size > 1 and not sharding.is_distributed():
            raise RuntimeError(
                f"world_size={context.world_size} but torch.distributed is not initialised in this process; "
                "the placement layer (rl_core.placement) initialises it before building engines"
            )
        if sharding.is_distributed() and self.world_size != context.world_size:
            raise RuntimeError(f"the process group has {self.world_size} ranks but the worker context says {context.world_size}")
        self.sharded = sharding.is_distributed()
        self.uneven_micro_batches = not self.sharded  # FSDP2 gathers in every forward: ranks must run alike
        # one prompt forward per group of responses; not under FSDP (see rl_core.train_engine.shared_prompt);
        # by default on CPU only: on an H100 it measured no faster (bench/results/shared_prompt_h100.md)
        share = config.model.share_prompt_forward
        # (not by default under model.compile: a forward with a KV cache runs the compiled layers eagerly, rl_core.modeling)
        self.share_prompts = (self.device.type == "cpu" and not config.model.compile if share is None else bool(share)) and not self.sharded
        mcfg = config.model
        # LoRA (issue #32, rl_lora): the actor's base weights frozen in the compute dtype, float32 adapters only
        self.lora = role == "actor" and mcfg.lora_rank > 0
        fcfg = config.actor.fsdp_config
        self.param_offload, self.optimizer_offload, self.host_offload = offload.offload_modes(role, offload.role_offload_config(role, config), self.sharded)
        # the actor's / critic's training forwards keep their saved activations in host memory (rl_train_fsdp.activations)
        self.activation_offload = self.trainable and bool(getattr(mcfg, "enable_activation_offload", False))
        self.last_activations: activations.HostActivations | None = None
        model, _ = load_role_model(role, config, torch.float32 if self.trainable and not self.lora else self.compute_dtype)
        self.hf_config = model.config
        self.hf_class = type(model)
        self._setup_packing(model, config)
        if self.trainable and mcfg.enable_gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if self.lora:
            from rl_lora.adapters import LoraSpec, apply_lora

            model = apply_lora(model, LoraSpec.from_model_config(mcfg), dtype=self.compute_dtype, seed=config.trainer.seed)  # same start on every rank
        self.router_replay = self._router_replay(model, config)
        if mcfg.compile:
            compile_decoder_layers(model)
        if not self.trainable:
            model.requires_grad_(False)
        self.mixed_precision = self.trainable and self.compute_dtype != torch.float32
        # sharded: FSDP2's MixedPrecisionPolicy computes in compute_dtype; unsharded: torch.autocast
        self.autocast_dtype = self.compute_dtype if self.mixed_precision and not self.sharded else None
        if self.lora and self.autocast_dtype is not None:  # every forward runs under autocast: no fp32 copy of each adapted input
            from rl_lora.adapters import keep_input_dtype

            keep_input_dtype(model)
        self.experts = self._expert_parallel(model, config)
        if self.sharded:
            reduce = torch.bfloat16 if role == "actor" and fcfg.reduce_dtype == "bfloat16" else torch.float32
            model = sharding.shard_model(model, self.device, param_dtype=self.compute_dtype if self.mixed_precision else None, reduce_dtype=reduce,
                                         shard_size=fcfg.fsdp_size, offload=self.host_offload,
                                         ignored=set(self.experts.params) if self.experts is not None else None)
        else:
            model = model.to(self.device)
        self.model = model
        self.model.eval()
        self.offload_chunk_bytes = offload.CHUNK_BYTES
        if self.param_offload:
            offload.move_params(self.model, torch.device("cpu"))
        if self.trainable:
            # The fused AdamW kernel: the same update up to rounding. On CPU the default (per-parameter loop)
            # took 0.96 s a step for a 135M model, the fused kernel 0.05 s (2 cores, torch 2.13); on CUDA it
            # replaces foreach's several passes over the fp32 state (sharded too: DTensor parameters, as
            # torchtitan runs it). Not for sharded CPU runs (gloo tests keep torch's default there).
            fused = (self.device.type == "cuda" and not self.host_offload) or not self.sharded  # host-offloaded: torch's CPU step
            self.optimizer = build_adamw(self.model, config, role, **({"fused": True} if fused else {}))
            if self.experts is not None:  # the experts (DTensors of another mesh) in a parameter group of their own
                own = {id(p) for p in self.experts.params}
                group = self.optimizer.param_groups[0]  # nothing stepped yet: no state to move
                group["params"] = [p for p in group["params"] if id(p) not in own]
                self.optimizer.add_param_group({"params": [p for p in self.experts.params if p.requires_grad]})

    def _router_replay(self, model: torch.nn.Module, config):
        """``actor.router_replay`` R2 / R3 (the actor only; the reference and the critic route natively, as verl's
        default ``ref.router_replay.mode=disabled``): the routers' recorder (rl-routing-replay), else None."""
        mode = getattr(config.actor, "router_replay", "disabled")
        if mode == "disabled" or self.role != "actor":
            return None
        from rl_routing_replay.replay import RouterReplay

        if config.model.compile:
            raise ValueError(f"actor.router_replay={mode} with model.compile=true: the replayed routers are not compiled here; set one of them off")
        if self.packed:
            raise ValueError(f"actor.router_replay={mode} replays padded forwards only; set actor.use_remove_padding=false")
        self.share_prompts = False  # one prompt row per group would not line up with each row's recorded routing
        return RouterReplay(model)

    def _expert_parallel(self, model: torch.nn.Module, config):
        """``train.expert_model_parallel_size`` > 1: this rank's experts of every MoE layer (rl_train_fsdp.experts), else None."""
        ep = int(getattr(config.train, "expert_model_parallel_size", 1) or 1)
        if ep == 1:
            return None
        if not self.sharded:
            raise ValueError(f"train.expert_model_parallel_size={ep} needs {ep} or more ranks with a process group; set it to 1")
        if self.lora:
            raise ValueError(f"train.expert_model_parallel_size={ep} with LoRA (model.lora_rank): not built together; set one of them off")
        from rl_train_fsdp.experts import ExpertParallel

        experts = ExpertParallel(ep, self.device, host=self.host_offload)
        experts.shard(model)
        return experts

    def _setup_packing(self, model: torch.nn.Module, config) -> None:
        """Packed sequences (``actor.use_remove_padding``, on where exact) and Ulysses SP (``actor.ulysses_sequence_parallel_size``)."""
        sp = int(getattr(config.actor, "ulysses_sequence_parallel_size", 1) or 1)
        self.seq_parallel = None
        self.packed = packing.packing_enabled(config, share_prompts=self.share_prompts and self.role != "critic") and packing.can_pack(model)
        self.packed_by_default = self.packed and getattr(config.actor, "use_remove_padding", None) is None
        self.pad_to_length = bool(getattr(config.actor, "pad_to_length", False))
        if self.pad_to_length:
            self.packed_by_default = False  # every micro-batch packed, none run padded by the speed heuristic
            if not packing.can_pack(model):
                raise ValueError(
                    "actor.pad_to_length=true pads packed micro-batches, and the "
                    f"{getattr(model.config, 'model_type', type(model).__name__)} model cannot be packed here "
                    f"(supported: {', '.join(sorted(packing.PACKABLE_TYPES))} without a sliding window); set it to false"
                )
        if sp > 1:
            if not packing.can_pack(model):
                raise ValueError(
                    f"actor.ulysses_sequence_parallel_size={sp}: sequence parallelism runs on packed sequences, which the "
                    f"{getattr(model.config, 'model_type', type(model).__name__)} model does not support here "
                    f"(supported: {', '.join(sorted(packing.PACKABLE_TYPES))} without a sliding window); set it to 1"
                )
            if not sharding.is_distributed():
                raise ValueError(f"actor.ulysses_sequence_parallel_size={sp} needs {sp} or more ranks with a process group; set it to 1")
            self.seq_parallel = ulysses.UlyssesGroup(sp)
            self.packed = True
            packing.use_attention(model, ulysses.ATTENTION, ulysses.ulysses_attention)
        elif self.packed:
            packing.use_attention(model)

    def all_reduce(self, value: torch.Tensor, op: str, over: str = "data") -> torch.Tensor:
        if over == "data" and self.seq_parallel is not None:  # the data-parallel ranks: one per sequence-parallel group
            return sharding.all_reduce(value, op, group=self.seq_parallel.dp_group)
        return sharding.all_reduce(value, op)  # without sequence parallelism every rank is a data-parallel rank

    # ------------------------------------------------------------- update
    def backward(self, loss: torch.Tensor | None, weight: float) -> None:
        # FSDP2 averages gradients over ranks: multiply by the world size so the result is the global loss's gradient.
        try:
            (loss * (weight * self.world_size)).backward()
        finally:
            if self.router_replay is not None:  # the routing was kept for activation checkpointing's recompute
                self.router_replay.stop()

    def reduce_and_clip(self, max_norm: float | None) -> float:
        return sharding.clip_grad_norm(list(self.model.parameters()), max_norm, experts=self.experts)

    # ----------------------------------------------------------- checkpoint
    def save_checkpoint(self, path: str, scheduler: dict[str, Any] | None) -> None:
        """DCP model + optimizer shards, scheduler and RNG per rank (:mod:`rl_train_fsdp.checkpointing`)."""
        checkpointing.save(self, path, scheduler)

    def load_checkpoint(self, path: str) -> dict[str, Any] | None:
        """Restore what :meth:`save_checkpoint` wrote (bit-identical on the same number of ranks); the scheduler state."""
        return checkpointing.load(self, path)
