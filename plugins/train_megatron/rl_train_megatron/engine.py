"""The Megatron train engine: one role (actor, critic or ref) of one worker process.

:class:`MegatronBackend` is the ``megatron`` card's factory: the primitives of
:class:`rl_core.train_engine.backend.TrainBackend`, which core drives
(:class:`rl_core.train_engine.engine.RoleEngine`: epochs, mini- and micro-batches
fixed or by token budget, zero-advantage rows skipped, loss weighting, the
guard). ``build_engine(role, config, context)`` builds both, for benches and tests.

Parallelism
    ``train.tensor_model_parallel_size`` (TP) ranks hold one model replica
    (megatron-core Column/RowParallelLinear, vocabulary-parallel embedding
    and LM head); data parallelism runs over ``world / TP`` replicas, with
    the gradient all-reduced over the data-parallel group after each
    mini-batch. Ranks of a TP group get the same shard of the step (the
    controller's dispatch, :mod:`rl_train_megatron.parallel`) and return
    identical results. ``train.pipeline_model_parallel_size`` (PP) stages
    each hold an equal share of the layers; training steps go through megatron-core's 1F1B schedule
    (:mod:`rl_train_megatron.core_pipeline`), other passes and layouts one micro-batch at a time
    (:mod:`rl_train_megatron.pipeline`: no overlap between stages); the last stage's results are broadcast to all.
    With tied embeddings the last stage holds a copy of the embedding as its
    LM head; the two copies' gradients are summed before each step.
    ``train.options.virtual_pipeline_model_parallel_size`` (VPP): each stage holds VPP model chunks
    (megatron-core's interleaved layout, :func:`rl_train_megatron.stages.virtual_split`); a micro-batch
    goes through the virtual stages in order (chunk v of stage p is virtual stage v x PP + p).
    ``train.context_parallel_size`` (CP) ranks of a replica split each
    sequence's columns (2 x CP load-balanced chunks) and all-gather keys /
    values in the attention (:mod:`rl_train_megatron.context_parallel`);
    their gradients are summed with the data-parallel ones.
    ``train.options.fully_shard`` (verl's ``use_megatron_fsdp``): parameters, gradients and AdamW state sharded over the
    data-parallel ranks of each TP shard (torch FSDP2 on megatron-core's modules, :mod:`rl_train_megatron.fully_sharded`);
    the forward runs inside its root unit, the data-parallel all-reduce and ZeRO-1 are bypassed.

Models
    Built from the HF config (:mod:`rl_train_megatron.model`); weights from the HF checkpoint (or
    ``model.random_init`` under ``trainer.seed``), converted and sliced for this rank. The critic is the
    backbone plus a scalar ``value_head`` (HF ``*ForTokenClassification``'s ``score``).

MoE routing replay
    ``actor.router_replay`` R2 / R3 (the actor only): megatron-core's routers take the batch's ``routed_experts`` at the
    positions of the tokens each of them sees on this rank; R2's old-log-prob pass records them
    (:mod:`rl_train_megatron.router_replay`).

Numbers
    Parameters, AdamW state, log-probs, entropies, values and losses are
    float32. ``model.dtype=bfloat16`` / ``float16`` computes under
    ``torch.autocast`` on a GPU; on the CPU the engine computes in float32.
    Log-probs / entropy come from each TP rank's vocabulary slice
    (:func:`rl_train_megatron.model.vocab_parallel_log_probs`).

Update
    Core's (:mod:`rl_core.train_engine.update`); gradients summed over the data-parallel group once per mini-batch
    (ranks may run different numbers of micro-batches); AdamW over this rank's shards; :mod:`rl_train_megatron.grads`.
"""

from __future__ import annotations

from typing import Any

import attrs
import torch
import torch.distributed as dist
from rl_core.backends import WorkerContext
from rl_core.train_engine.backend import TrainBackend, build_adamw, load_role_model
from rl_core.train_engine.engine import RoleEngine
from rl_offload import offload

from rl_train_megatron import convert, cpu_shims, dist_optimizer, fully_sharded, grads, linear, parallel, zero
from rl_train_megatron import model as mmodel
from rl_train_megatron import router_replay as rr_mod
from rl_train_megatron import sequence_parallel as seq_par
from rl_train_megatron.checkpoint import Checkpoints
from rl_train_megatron.core_pipeline import CorePipeline
from rl_train_megatron.offload import Offload
from rl_train_megatron.options import megatron_options, transformer_overrides, virtual_stages
from rl_train_megatron.pipeline import Pipe
from rl_train_megatron.schedule import Schedule
from rl_train_megatron import sigmoid_moe
from rl_train_megatron.weights import WeightExport


#: torch's fused AdamW on GPUs (False: foreach, bench/megatron_update_mfu_gpu.py's A/B; not a setting)
FUSED_ADAMW = True


def pipeline_stages(layers: int, pp: int, given: dict, vpp: int | None = None) -> tuple[tuple[int, ...], int]:
    """Layers per (virtual) stage and model chunks per stage (:func:`rl_train_megatron.layout.plan`); a bad split names
    its key (a transformer_config field or train.options.virtual_pipeline_model_parallel_size)."""
    from rl_train_megatron.layout import plan
    from rl_train_megatron.stages import VIRTUAL, StageSplitError

    try:
        return plan(layers, pp, vpp, given)
    except StageSplitError as exc:
        key = "train.options." + VIRTUAL if exc.field == VIRTUAL else f"train.options.transformer_config.{exc.field}"
        raise mmodel.ParallelSizeError(f"{key}: {exc}") from None


def build_engine(role: str, config, context: WorkerContext, **kwargs: Any) -> RoleEngine:
    """The role's engine (core's driver over :class:`MegatronBackend`), for benches and tests; ``kwargs``: RoleEngine's."""
    return RoleEngine(MegatronBackend(role, config, context), **kwargs)


class MegatronBackend(CorePipeline, Schedule, WeightExport, Checkpoints, Offload, TrainBackend):
    """The ``megatron`` card's factory; its forward / backward, weight export, checkpoints and offload are mixed in from
    :mod:`rl_train_megatron.schedule`, :mod:`~rl_train_megatron.weights`, :mod:`~rl_train_megatron.checkpoint` and
    :mod:`~rl_train_megatron.offload`."""

    name = "megatron"

    def __init__(self, role: str, config, context: WorkerContext) -> None:
        super().__init__(role, config, context)
        tp, pp = config.train.tensor_model_parallel_size, config.train.pipeline_model_parallel_size
        cp = config.train.context_parallel_size
        ep = int(getattr(config.train, "expert_model_parallel_size", 1) or 1)
        etp = getattr(config.train, "expert_tensor_parallel_size", None)
        hf, key = load_role_model(role, config, torch.float32)
        self.hf_config, self.hf_class = hf.config, type(hf)
        self.generation_config = getattr(hf, "generation_config", None)
        self.shape = mmodel.model_shape(hf.config, critic=role == "critic", key=key)
        if not self.shape.moe:
            etp = None  # a dense model has no experts to slice (a config's expert TP is only checked against MoE models)
        opts = megatron_options(config)
        vpp = virtual_stages(opts)
        if pp > 1 or vpp > 1:  # (a custom pipeline layout gives the model chunks per stage too)
            stages, vpp = pipeline_stages(self.shape.layers, pp, opts.transformer_config, vpp)
            self.shape = attrs.evolve(self.shape, stages=stages)
        self.vpp = vpp  # model chunks per pipeline stage (virtual pipeline stages)
        self.sp = seq_par.wanted(opts.transformer_config, tp)  # Megatron sequence parallelism (rl_train_megatron.sequence_parallel)
        mmodel.check_divisible(self.shape, tp, pp * vpp, ep, etp, self.sp)
        sigmoid_moe.check_expert_bias(self.shape, opts.transformer_config)  # (before the parallel state is set up)
        if self.shape.moe and self.device.type == "cpu":
            mmodel.check_moe_on_cpu(opts.transformer_config)
        replay = rr_mod.wanted(config, role, self.shape, opts.transformer_config)  # actor.router_replay (rl_train_megatron.router_replay)
        if context.world_size > 1 and not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError(f"world_size={context.world_size} but torch.distributed is not initialised in this process")
        self.topo = parallel.acquire(tp, pp, self.device, cp, ep, etp)
        if (self.shape.moe or self.sp) and self.device.type == "cpu":  # sequence parallelism: the same gathers as the MoE dispatcher
            cpu_shims.install_moe(self.device)
        elif self.shape.moe:  # on GPUs without TransformerEngine, megatron-core 0.16.1's router matmul needs it too
            cpu_shims.install_router_gemm_fallback()
        self._released = False
        self.rank, self.world_size = self.topo.rank, self.topo.world
        if context.world_size > 1 and self.world_size != context.world_size:
            raise RuntimeError(f"the process group has {self.world_size} ranks but the worker context says {context.world_size}")
        self.sharded = self.world_size > 1
        self.uneven_micro_batches = True  # gradients are reduced once per mini-batch, not in each backward
        if int(getattr(config.train, "expert_model_parallel_size", 1) or 1) > 1:
            self.uneven_micro_batches = False  # every forward is a collective of the expert-parallel group: same count on every rank
        self.pipe = Pipe(parallel.pp_group(), pp, self.topo.pp_rank, vpp)
        self._stage_layout = None
        self._pending: list[tuple[torch.Tensor | None, torch.Tensor]] | None = None  # the training forward's (h_in, h) per model chunk
        self.mixed_precision = self.device.type == "cuda" and self.compute_dtype != torch.float32
        self.autocast_dtype = self.compute_dtype if self.mixed_precision else None  # on the CPU: float32

        full = convert.hf_to_full(hf.state_dict(), self.shape)
        del hf
        t = self.topo
        passed = transformer_overrides(config, opts) if self.trainable else opts.transformer_config
        self.chunks = []  # this stage's model chunks (one without virtual stages); chunk v is virtual stage v x PP + pp_rank
        for v in range(vpp):
            local = convert.split_for_rank(full, self.shape, tp, t.tp_rank, pp * vpp, v * pp + t.pp_rank, t.ep, t.ep_rank, t.etp, t.etp_rank)
            chunk = mmodel.build_model(self.shape, self.hf_config, tp, pp, passed, cp=cp, ep=t.ep, etp=t.etp if self.shape.moe else None,
                                       vpp=vpp, vp_stage=v)
            convert.load_local_state(chunk, local)
            linear.use_plain_linear(chunk)  # layers with nothing to communicate: F.linear (rl_train_megatron.linear)
            self.chunks.append(chunk)
        del full, local
        self.router_replay = rr_mod.MegatronRouterReplay(self.chunks, self.shape) if replay else None
        # parameters named <chunk>.<megatron name> with virtual stages (checkpoints, optimizer, offload see one module)
        model = self.chunks[0] if vpp == 1 else torch.nn.ModuleList(self.chunks)
        if not self.trainable:
            model.requires_grad_(False)
        self.model = model.to(self.device)
        self.model.eval()
        self.stage = None  # train.options.fully_shard: the root FSDP unit over the data-parallel group (rl_train_megatron.fully_sharded)
        if opts.fully_shard:
            fully_sharded.check(self, config, opts)
            self.stage = fully_sharded.shard(self.chunks[0], parallel.grad_group(), self.device)
            if fully_sharded.group_size(parallel.grad_group()) > 1:  # every forward / backward gathers over it: the same count on every rank
                self.uneven_micro_batches = False
        # offload between phases (train.options, verl's megatron.*_offload; rl_offload.offload)
        actor = role == "actor"
        self.param_offload = opts.param_offload if actor else role == "ref" and opts.ref_param_offload
        self.grad_offload = actor and opts.grad_offload
        self.optimizer_cpu_offload = actor and opts.optimizer_cpu_offload
        self.offload_fraction = float(opts.optimizer_offload_fraction)
        self.optimizer_offload = actor and opts.optimizer_offload and not self.optimizer_cpu_offload
        self.offload_chunk_bytes = offload.CHUNK_BYTES
        self.offload_log: list[tuple[str, str, int]] = []  # (what, where to, how many tensors): the tests' view
        if self.param_offload:
            self._send("params", torch.device("cpu"))
        self.zero = None  # train.distributed_optimizer: AdamW state sharded over the replicas (rl_train_megatron.zero)
        # torch's fused AdamW kernel on a GPU, as the fsdp backend steps (one kernel over the fp32 state instead of
        # foreach's several passes); the host steps of the optimizer offload keep torch's default
        fused = {"fused": True} if FUSED_ADAMW and self.device.type == "cuda" and not (self.optimizer_cpu_offload or self.optimizer_offload) else {}
        self.native_optimizer = None  # megatron-core's DistributedOptimizer (rl_train_megatron.dist_optimizer), where it runs
        distributed = self.trainable and getattr(config.train, "distributed_optimizer", False) and self.stage is None  # (fully sharded: already)
        self.reference_optimizer = dist_optimizer.problem(self, config) if distributed else None  # why ZeRO-1 (None: megatron-core's)
        if distributed and self.reference_optimizer is None:
            self.native_optimizer = dist_optimizer.NativeDistributedOptimizer(self.chunks[0], config, role, opts.ddp_config)
            self.optimizer = self.native_optimizer.torch_optimizer  # (core's LR schedule and the checkpoints see the inner AdamW)
        elif distributed:
            self.zero = self._sharded_state()
            self.optimizer = build_adamw(zero.OwnedParameters(self.zero.owned), config, role, **fused)
        elif self.trainable:
            self.optimizer = build_adamw(self.model, config, role, **fused)

    def _sharded_state(self) -> "zero.ShardedState":
        dense, experts = parallel.grad_group(), parallel.expert_dp_group() if self.shape.moe else None
        named = [(n, p) for n, p in self.model.named_parameters() if p.requires_grad]
        state = zero.ShardedState(named, lambda n: experts if convert.is_expert(n) else dense)
        if not state.owned:
            raise mmodel.ParallelSizeError(
                f"train.distributed_optimizer: rank {self.rank} owns none of its {len(named)} trainable tensors (more data-parallel ranks "
                "than tensors to deal out); set train.distributed_optimizer=false for this model"
            )
        return state

    # -------------------------------------------------------------- update
    def all_reduce(self, value: torch.Tensor, op: str, over: str = "data") -> torch.Tensor:
        return parallel.all_reduce(value, op, parallel.dp_group() if over == "data" else None)

    def from_heads_stage(self, obj: Any) -> Any:
        return self.pipe.object_from_last(obj)

    def reduce_and_clip(self, max_norm: float | None) -> float:
        """Tied-embedding copies summed (PP > 1), gradients summed over data-parallel ranks, the whole-model norm
        (:mod:`rl_train_megatron.grads`)."""
        if self.stage is not None:  # train.options.fully_shard: summed by FSDP's reduce-scatter in the backward
            return fully_sharded.reduce_and_clip(self, max_norm)
        if self.native_optimizer is not None:  # megatron-core's buckets, norm and clipping (rl_train_megatron.dist_optimizer)
            return self.native_optimizer.reduce_and_clip(max_norm)
        pp_tied = self.shape.tied and self.topo.pp > 1
        grads.reduce_tied_embedding_grads(self.chunks[0] if self.chunks[0].pre_process else self.chunks[-1], pp_tied)
        if self.shape.qk_norm and self.topo.tp > 1:  # Qwen3's q/k norms: each TP rank's gradient covers its own heads only
            grads.reduce_grads([p for n, p in self.model.named_parameters() if convert.is_qk_norm(n) and p.grad is not None], parallel.tp_group())
        if self.sp:  # norms / routers saw this rank's share of the tokens only (q/k norms: summed above)
            grads.reduce_grads(seq_par.sequence_parallel_params(self.model, convert.is_qk_norm), parallel.tp_group())
        named = [(n, p) for n, p in self.model.named_parameters() if p.requires_grad]
        experts = [p for n, p in named if convert.is_expert(n)]
        grads.reduce_grads([p for n, p in named if not convert.is_expert(n)], parallel.grad_group())
        if experts:  # each rank's experts saw the tokens of its whole EP group (the dispatcher's all-gather)
            grads.reduce_grads(experts, parallel.expert_dp_group())
        counted = [p for n, p in self.model.named_parameters()
                   if not convert.is_expert(n) and (convert.split_dim(n) is not None or self.topo.tp_rank == 0) and not self._tied_copy(n)]
        expert_group = parallel.expert_mp_group() if self.shape.moe else None  # (a stage of dense layers only: its norm part is 0)
        norm = grads.clip_grad_norm(list(self.model.parameters()), counted, max_norm, self.device, experts, expert_group)
        share = parallel.tp_cp_group() if self.sp or self.topo.cp > 1 else None  # the ranks whose routers share a sequence's tokens
        self._moe_metrics = (mmodel.aux_loss_metrics(self.shape, parallel.dp_group(), parallel.pp_group(), share)
                             if self.shape.moe else {})
        if self.shape.expert_bias:  # megatron-core's aux-loss-free bias update (its finalize_model_grads; rl_train_megatron.sigmoid_moe)
            sigmoid_moe.update_expert_bias(self.model, sigmoid_moe.stage_group())
        return norm

    def zero_grad(self) -> None:
        """Every parameter's gradient (with the distributed optimizer the AdamW holds only this rank's own)."""
        if self.native_optimizer is not None:  # megatron-core's gradient buffers
            self.native_optimizer.zero_grad()
        self.model.zero_grad(set_to_none=True)

    def runs_micro_batches(self) -> bool:
        """megatron-core's schedule (PP > 1, :mod:`rl_train_megatron.core_pipeline`), or the distributed optimizer's
        overlapped gradient reduce-scatter (it must know the mini-batch's last micro-batch)."""
        native = self.native_optimizer
        return super().runs_micro_batches() or (native is not None and native.overlap_grad_reduce)

    def run_micro_batches(self, items, loss_of, *, temperature: float, with_entropy: bool, entropy_grad: bool) -> None:
        if super().runs_micro_batches():
            return super().run_micro_batches(items, loss_of, temperature=temperature, with_entropy=with_entropy, entropy_grad=entropy_grad)
        items = list(items)
        heads_kw = {"temperature": temperature, "with_entropy": with_entropy, "entropy_grad": entropy_grad}
        for i, item in enumerate(items):  # the buckets' reduce-scatter starts in the last micro-batch's backward
            with self.native_optimizer.no_sync(last=i == len(items) - 1):
                self._reference_run([item], loss_of, heads_kw)

    def step_metrics(self) -> dict[str, float]:
        """MoE: ``<role>/moe/<loss>``, the routers' aux / z losses of the last mini-batch (mean over layers, micro-batches
        and data-parallel ranks), as megatron-core's tracker recorded them (unscaled: without their coefficients)."""
        return {f"{self.role}/{k}": v for k, v in (getattr(self, "_moe_metrics", {}) or {}).items()}

    def _tied_copy(self, name: str) -> bool:
        """The last stage's copy of the tied embedding (PP > 1; the LM head of its last model chunk, named
        ``output_layer.weight`` or ``<chunk>.output_layer.weight``): the same weight as the first stage's."""
        return self.shape.tied and self.topo.pp > 1 and (name == "output_layer.weight" or name.endswith(".output_layer.weight"))

    def release(self) -> None:
        if not getattr(self, "_released", True):
            self._released = True
            parallel.release()
