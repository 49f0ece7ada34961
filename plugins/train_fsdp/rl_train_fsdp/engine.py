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

import contextlib
import warnings
from pathlib import Path
from typing import Any, Iterator

import attrs
import torch
from rl_core import multimodal
from rl_core.backends import WorkerContext
from rl_core.checkpoints import copy_state
from rl_core.logprobs import DEFAULT_CHUNK as DEFAULT_LOGPROB_CHUNK
from rl_core.logprobs import forward_response_chunked
from rl_core.modeling import compile_decoder_layers, forward_values
from rl_core.train_engine.backend import Heads, TrainBackend, build_adamw, load_role_model
from rl_core.train_engine.engine import RoleEngine
from rl_core.train_engine import packing
from rl_core.train_engine.hf_export import write_hf_folder, write_tokenizer

from rl_train_fsdp import activations, checkpointing, offload, sharding, ulysses


def build_engine(role: str, config, context: WorkerContext, **kwargs: Any) -> RoleEngine:
    """The role's engine (core's driver over :class:`FSDPBackend`), for benches and tests; ``kwargs``: RoleEngine's."""
    return RoleEngine(FSDPBackend(role, config, context), **kwargs)


def _offload_config(role: str, config):
    """The role's offload switches: ``actor.fsdp_config`` / ``critic.fsdp_config``; the reference has none."""
    return {"actor": config.actor.fsdp_config, "critic": getattr(config.critic, "fsdp_config", None)}.get(role)


def offload_modes(role: str, fcfg, sharded: bool) -> tuple[bool, bool, bool]:
    """``(param_offload, optimizer_offload, host_offload)`` of a trainable role from its ``fsdp_config`` switches
    (``fcfg``; None: no offload).

    Sharded, any of param_offload / optimizer_offload / offload_policy is FSDP2's CPUOffloadPolicy (sharded
    parameters, gradients, AdamW state and its step on the host: ``host_offload``). On one unsharded device
    param_offload / optimizer_offload are rl_train_fsdp.offload's mechanisms, and offload_policy (verl's FSDP2 switch
    for everything on the host) turns both on.
    """
    if role not in ("actor", "critic") or fcfg is None:
        return False, False, False
    param, optim, policy = bool(fcfg.param_offload), bool(fcfg.optimizer_offload), bool(getattr(fcfg, "offload_policy", False))
    if sharded:
        return False, False, param or optim or policy
    return param or policy, optim or policy, False


class FSDPBackend(TrainBackend):
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
        self.share_prompts = (self.device.type == "cpu" if share is None else bool(share)) and not self.sharded
        mcfg = config.model
        # LoRA (issue #32, rl_core.lora): the actor's base weights frozen in the compute dtype, float32 adapters only
        self.lora = role == "actor" and mcfg.lora_rank > 0
        fcfg = config.actor.fsdp_config
        self.param_offload, self.optimizer_offload, self.host_offload = offload_modes(role, _offload_config(role, config), self.sharded)
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
            from rl_core.lora import LoraSpec, apply_lora

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
            from rl_core.lora import keep_input_dtype

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
        default ``ref.router_replay.mode=disabled``): the routers' recorder (rl_core.routing_replay), else None."""
        mode = getattr(config.actor, "router_replay", "disabled")
        if mode == "disabled" or self.role != "actor":
            return None
        from rl_core.routing_replay import RouterReplay

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

    def _forward_packed(self, x: dict[str, torch.Tensor], *, temperature: float, with_entropy: bool, entropy_grad: bool, chunk) -> Heads | None:
        sp = self.seq_parallel
        actor = self.config.actor  # actor.pad_to_length: fixed row lengths, in multiples of the bucket
        pad_to = packing.row_multiple(actor.fsdp_config.pad_to_length_bucket if actor.pad_to_length else None, sp.size if sp else 1)
        p = packing.pack(x["input_ids"], x["attention_mask"], x["position_ids"], x["responses"].shape[1], pad_to=pad_to)
        if p is None:
            if sp is not None:
                raise ValueError("sequence parallelism needs each response right after its prompt (no padding between them)")
            return None
        if self.role == "critic":
            return Heads(values=packing.forward_values_packed(self.model, p, sp))
        out = packing.forward_log_probs_packed(
            self.model, p, temperature=temperature, with_entropy=with_entropy, entropy_grad=entropy_grad, chunk_size=chunk, shard=sp,
        )
        if out is None:
            if sp is not None:
                raise ValueError("sequence parallelism needs a plain bias-free LM head (the chunked log-prob path)")
            return None
        return Heads(log_probs=out[0], entropy=out[1])

    # ------------------------------------------------------ LoRA and offload
    def reference_policy(self):
        """LoRA: the same model with its adapters off (the base policy); no second copy is loaded."""
        if not self.lora:
            raise RuntimeError(f"the {self.role} model has no LoRA adapters: the reference policy needs a ref model of its own (model.lora_rank=0)")
        from rl_core.lora import adapters_disabled

        return self._native_routing(adapters_disabled(self.model))

    @contextlib.contextmanager
    def _native_routing(self, inner):
        """The reference policy routes natively (verl's ref.router_replay.mode defaults to disabled), also when it is
        this model with its LoRA adapters off under actor.router_replay."""
        rr, self.router_replay = self.router_replay, None
        try:
            with inner:
                yield
        finally:
            self.router_replay = rr

    @contextlib.contextmanager
    def on_device(self, phase: str):
        """param_offload: the weights on the device for the phase, in host memory after (rl_train_fsdp.offload)."""
        if not self.param_offload:
            yield
            return
        offload.move_params(self.model, self.device)
        try:
            yield
        finally:
            offload.move_params(self.model, torch.device("cpu"))

    def step(self) -> None:
        if self.optimizer_offload:
            offload.streamed_step(self.optimizer, self.device, self.offload_chunk_bytes)
            self.optimizer.zero_grad(set_to_none=True)
        else:
            super().step()

    # ------------------------------------------------------------- forwards
    def forward(self, x: dict[str, torch.Tensor], *, temperature: float, with_entropy: bool, entropy_grad: bool, training: bool) -> Heads:
        rr = self.router_replay
        if rr is None:
            return self._forward_offloaded(x, temperature=temperature, with_entropy=with_entropy, entropy_grad=entropy_grad, training=training)
        # routing replay (rl_core.routing_replay): the batch's routed_experts (R3: the rollout's; R2: the old-log-prob
        # pass's) are forced in this forward and kept for its backward; R2's old-log-prob pass records them
        mode = self.config.actor.router_replay
        if "routed_experts" in x:
            rr.replay(x["routed_experts"], x["attention_mask"])
        elif mode == "R3":
            raise ValueError("actor.router_replay=R3 but the batch has no routed_experts: the rollout engine returned none "
                             "(rollout.return_routed_experts=true with a rollout backend that records them)")
        elif not training:  # R2's old-log-prob pass
            with rr.recording():
                heads = self._forward_offloaded(x, temperature=temperature, with_entropy=with_entropy, entropy_grad=entropy_grad, training=training)
            return attrs.evolve(heads, routed_experts=rr.recorded_layout(x["attention_mask"]))
        # else R2 on-policy without an old-log-prob pass: this forward is the one R2 would record; it routes natively
        try:
            return self._forward_offloaded(x, temperature=temperature, with_entropy=with_entropy, entropy_grad=entropy_grad, training=training)
        finally:
            if not training:
                rr.stop()

    def _forward_offloaded(self, x: dict[str, torch.Tensor], *, temperature: float, with_entropy: bool, entropy_grad: bool, training: bool) -> Heads:
        hooks = activations.offloaded(self.activation_offload and training, self.device)
        if hooks is None:
            return self._forward(x, temperature=temperature, with_entropy=with_entropy, entropy_grad=entropy_grad)
        self.last_activations = hooks
        with hooks:
            return self._forward(x, temperature=temperature, with_entropy=with_entropy, entropy_grad=entropy_grad)

    def _forward(self, x: dict[str, torch.Tensor], *, temperature: float, with_entropy: bool, entropy_grad: bool) -> Heads:
        chunk = self.config.model.logprob_chunk_size
        chunk = (DEFAULT_LOGPROB_CHUNK if self.device.type != "cpu" else 0) if chunk is None else chunk
        if multimodal.has_images(x.get(multimodal.FIELD)):  # prompts with images (rl_core.multimodal): one plain forward
            return self._forward_images(x, temperature=temperature, with_entropy=with_entropy, entropy_grad=entropy_grad)
        if self.packed and not packing.run_padded(x["attention_mask"], chosen_by_default=self.packed_by_default, sequence_parallel=self.seq_parallel is not None):
            heads = self._forward_packed(x, temperature=temperature, with_entropy=with_entropy, entropy_grad=entropy_grad, chunk=chunk)
            if heads is not None:
                return heads
        if self.role == "critic":
            with warnings.catch_warnings():
                # FSDP2 warns that the token-classification output is a view; nothing here writes to it in place.
                warnings.filterwarnings("ignore", message=r"FSDP2-wrapped module .* returned a view tensor")
                return Heads(values=forward_values(self.model, x["input_ids"], x["attention_mask"], x["position_ids"], x["responses"].shape[1]))
        # the LM head in chunks of tokens (rl_core.logprobs): no full-vocab float32 logits; model.logprob_chunk_size
        lp, ent = forward_response_chunked(
            self.model, x["input_ids"], x["attention_mask"], x["position_ids"], x["responses"],
            temperature=temperature, with_entropy=with_entropy, entropy_grad=entropy_grad, share_prompts=self.share_prompts,
            chunk_size=chunk,
        )
        return Heads(log_probs=lp, entropy=ent)

    def _forward_images(self, x: dict, *, temperature: float, with_entropy: bool, entropy_grad: bool) -> Heads:
        if self.seq_parallel is not None or self.pad_to_length:  # (a VLM is never packed: packing.can_pack)
            raise ValueError("the prompts carry images, which packed sequences do not carry yet: set actor.ulysses_sequence_parallel_size=1 "
                             "and actor.pad_to_length=false (padded batches)")
        if self.role == "critic":
            raise ValueError("the prompts carry images, which the critic's forward does not read yet: use a critic-free estimator "
                             "(algorithm.adv_estimator=grpo, rloo, ...)")
        lp, ent = multimodal.forward_response(
            self.model, x["input_ids"], x["attention_mask"], x["responses"], x[multimodal.FIELD],
            temperature=temperature, with_entropy=with_entropy, entropy_grad=entropy_grad,
        )
        return Heads(log_probs=lp, entropy=ent)

    def backward(self, loss: torch.Tensor | None, weight: float) -> None:
        # FSDP2 averages gradients over ranks: multiply by the world size so the result is the global loss's gradient.
        try:
            (loss * (weight * self.world_size)).backward()
        finally:
            if self.router_replay is not None:  # the routing was kept for activation checkpointing's recompute
                self.router_replay.stop()

    def reduce_and_clip(self, max_norm: float | None) -> float:
        return sharding.clip_grad_norm(list(self.model.parameters()), max_norm, experts=self.experts)

    # ------------------------------------------------------------- weights
    def named_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """Full HF-named tensors on every rank, one at a time (all ranks must drain it).

        Float32 for actor / critic (the master weights), the load dtype for
        ref. Sharded: each is a fresh all-gathered tensor; unsharded: a
        detached view of the parameter itself (no copy: copy it if you keep
        it past the next update). Tied weights are yielded once (HF
        checkpoint convention).
        """
        if self.lora:  # the base model's names and shapes, adapters merged (float32): what any rollout engine loads
            from rl_core.lora import iter_merged

            return iter_merged(self.model, sharding.full_tensor)
        return sharding.iter_full_weights(self.model)

    def named_base_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """LoRA: the frozen base weights (HF names, adapters not folded in; every rank drains it), for an engine that
        applies the adapters itself (rollout.lora_sync=adapter)."""
        from rl_core.lora import iter_base

        return iter_base(self.model, sharding.full_tensor)

    def lora_adapter(self, dtype: torch.dtype | None = None) -> tuple[dict[str, torch.Tensor], dict] | None:
        """LoRA: the live adapters (in ``dtype``, default float32) and their PEFT config as rollout engines' LoRA APIs
        take them (rl_core.lora.engine_adapter)."""
        if not self.lora:
            return None
        from rl_core.lora import engine_adapter

        return engine_adapter(self.model, sharding.full_tensor, dtype)

    def sample_weights(self, positions: dict[str, torch.Tensor]) -> dict[str, torch.Tensor] | None:
        """The weights of the policy being trained at flat ``positions``, computed apart from :meth:`named_weights`
        (the trainer's side of rl_core.weight_sync_check); None without LoRA (named_weights are the parameters)."""
        if not self.lora:
            return None
        from rl_core.lora import sample_effective

        return sample_effective(self.model, positions, sharding.full_tensor)

    def save_hf(self, path: str) -> None:
        """An HF folder at ``path`` (rank 0 writes; every rank must call), the weights streamed shard by shard
        (rl_core.train_engine.hf_export: at most one shard held on the host). LoRA: a PEFT adapter folder
        (``peft.PeftModel.from_pretrained(base, path)``; its base is ``model.path``), and with
        ``trainer.save_merged_lora`` the merged weights in the model's dtype as an HF folder in ``path/merged``."""
        write = self.rank == 0
        folder, dtype = Path(path), None
        if self.lora:
            from rl_core.lora import MERGED_FOLDER, base_model_reference, write_adapter_folder

            write_adapter_folder(self.model, folder, sharding.full_tensor, write=write, base_model=base_model_reference(self.config.model.path))
            if write:
                write_tokenizer(folder, self.config)
            if not self.config.trainer.save_merged_lora:
                sharding.barrier()
                return
            folder, dtype = folder / MERGED_FOLDER, self.compute_dtype
        write_hf_folder(folder, self.named_weights(), self.hf_config, self.hf_class, getattr(self.model, "generation_config", None), self.config,
                        dtype=dtype, write=write)
        sharding.barrier()

    # ----------------------------------------------------------- checkpoint
    def save_checkpoint(self, path: str, scheduler: dict[str, Any] | None) -> None:
        """DCP model + optimizer shards, scheduler and RNG per rank (:mod:`rl_train_fsdp.checkpointing`)."""
        checkpointing.save(self, path, scheduler)

    def load_checkpoint(self, path: str) -> dict[str, Any] | None:
        """Restore what :meth:`save_checkpoint` wrote (bit-identical on the same number of ranks); the scheduler state."""
        return checkpointing.load(self, path)

    def local_state_dict(self) -> dict[str, Any]:
        """This rank's shards of the model and optimizer state, as plain tensors (copies).

        For tests and debugging: two engines with equal ``local_state_dict()``
        on every rank are in the same training state.
        """
        out: dict[str, Any] = {"model": {n: sharding.local_tensor(p.detach()).clone() for n, p in self.model.named_parameters()}}
        if self.optimizer is not None:
            out["optim"] = copy_state(self.optimizer.state_dict(), sharding.local_tensor)
        return out
