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
    each hold an equal share of the layers; micro-batches go through the
    stages one at a time (:mod:`rl_train_megatron.pipeline`: no overlap
    between stages), and the last stage's results are broadcast to all.
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

import contextlib
import json
from pathlib import Path
from typing import Any, Iterator

import attrs
import torch
import torch.distributed as dist
from rl_core.backends import WorkerContext
from rl_core.checkpoints import copy_state, load_rng_state, safe_load, save_rng_state, save_tensors
from rl_core.modeling import response_columns_in_use
from rl_core.problems import UserError
from rl_core.train_engine.backend import Heads, TrainBackend, build_adamw, load_role_model
from rl_core.train_engine.engine import RoleEngine
from rl_core.train_engine import offload
from rl_core.train_engine.hf_export import write_hf_folder

from rl_train_megatron import context_parallel as cp_mod
from rl_train_megatron import convert, cpu_shims, fully_sharded, grads, parallel, zero
from rl_train_megatron import model as mmodel
from rl_train_megatron import router_replay as rr_mod
from rl_train_megatron import sequence_parallel as seq_par
from rl_train_megatron.options import megatron_options, transformer_overrides, virtual_stages
from rl_train_megatron.pipeline import Pipe
from rl_train_megatron import sigmoid_moe
from rl_train_megatron.weights import gather_hf_weights, stage_layout

MANIFEST = "megatron.json"


class CheckpointMismatchError(UserError, RuntimeError):
    """A checkpoint written with another role or parallel layout."""


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


class MegatronBackend(TrainBackend):
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
            cpu_shims.install_moe()
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
        # offload between phases (train.options, verl's megatron.*_offload; rl_core.train_engine.offload)
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
        if self.trainable and getattr(config.train, "distributed_optimizer", False) and self.stage is None:  # (fully sharded: already)
            self.zero = self._sharded_state()
            self.optimizer = build_adamw(zero.OwnedParameters(self.zero.owned), config, role)
        elif self.trainable:
            self.optimizer = build_adamw(self.model, config, role)

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

    # -------------------------------------------------------------- offload
    def _send(self, what: str, device: torch.device) -> None:
        if what == "params":
            offload.move_params(self.model, device)
            n = sum(1 for _ in self.model.parameters())
        else:
            n = offload.move_grads(self.model, device)
        self.offload_log.append((what, device.type, n))

    @contextlib.contextmanager
    def on_device(self, phase: str):
        """param_offload / grad_offload: the parameters / gradients on the device for the phase, in host memory after."""
        moved = [w for w, on in (("params", self.param_offload), ("grads", self.grad_offload)) if on]
        if not moved:
            yield
            return
        for what in moved:
            self._send(what, self.device)
        try:
            yield
        finally:
            for what in moved:
                self._send(what, torch.device("cpu"))

    def step(self) -> None:
        """optimizer_cpu_offload: AdamW steps on the host; optimizer_offload: its host-resident state is brought to
        the device a chunk at a time (rl_core.train_engine.offload)."""
        if self.optimizer_cpu_offload:
            self.offload_log.append(("optimizer step", "cpu", offload.host_step(self.optimizer, self.offload_fraction)))
        elif self.optimizer_offload:
            self.offload_log.append(("optimizer state", "chunks", offload.streamed_step(self.optimizer, self.device, self.offload_chunk_bytes)))
        else:
            self.optimizer.step()
        if self.zero is not None:  # each owner's updated parameters to the other replicas
            self.zero.broadcast()
        self.zero_grad()

    def zero_grad(self) -> None:
        """Every parameter's gradient (with the distributed optimizer the AdamW holds only this rank's own)."""
        self.model.zero_grad(set_to_none=True)

    def all_reduce(self, value: torch.Tensor, op: str, over: str = "data") -> torch.Tensor:
        return parallel.all_reduce(value, op, parallel.dp_group() if over == "data" else None)

    def from_heads_stage(self, obj: Any) -> Any:
        return self.pipe.object_from_last(obj)

    # -------------------------------------------------------------- forward
    def _trim(self, x: dict[str, torch.Tensor], R: int) -> tuple[dict[str, torch.Tensor], int]:
        """Drop trailing response columns that are padding in every row (they hold 0 in the results)."""
        cut = R - response_columns_in_use(x["attention_mask"], R)
        if not cut:
            return x, 0
        y = dict(x)
        for k in ("input_ids", "attention_mask", "position_ids"):
            y[k] = x[k][:, :-cut]
        y["responses"] = x["responses"][:, :-cut]
        return y, cut

    def _same_tokens_over_ep(self, y: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Expert parallelism: megatron-core's all-gather dispatcher needs the same number of tokens on every rank of the
        expert-parallel group, so the micro-batch is padded to the group's largest (rows at the bottom, columns on the
        left, all masked). Their positions go through the routers like padding does (their losses count them)."""
        b, s = y["input_ids"].shape
        size = parallel.all_reduce(torch.tensor([b, s], device=self.device), "max", parallel.ep_group())
        B, S = int(size[0]), int(size[1])
        if (B, S) == (b, s):
            return y
        out = {}
        for k, v in y.items():
            if k in ("input_ids", "attention_mask", "position_ids"):
                v = torch.nn.functional.pad(v, (S - s, 0))
            if v.dim() >= 1 and v.shape[0] == b and B > b:
                v = torch.cat([v, v.new_zeros((B - b, *v.shape[1:]))])
            out[k] = v
        return out

    # Every forward runs this rank's pipeline stage (:meth:`_run_stage`); the heads (log-probs, values) run on the
    # last stage. Inference results are broadcast from the last stage; the update back-propagates stage by stage.
    def _split(self, y: dict[str, torch.Tensor]) -> cp_mod.SeqSplit | None:
        """This CP rank's columns of the batch (None without context parallelism); with sequence parallelism each CP rank's
        columns are a multiple of TP (the sequence is right-padded to a multiple of 2 x CP x TP)."""
        if self.topo.cp == 1:
            return None
        return cp_mod.SeqSplit.of(y["input_ids"].shape[1], self.topo.cp, self.topo.cp_rank, self.device, multiple=self.topo.tp if self.sp else 1)

    def _run_stage(self, y: dict[str, torch.Tensor], split: cp_mod.SeqSplit | None = None) -> list[tuple[torch.Tensor | None, torch.Tensor]]:
        """Per model chunk ``(input hidden leaf or None, the chunk's output [s, b, h])``; each output is sent on to the
        next (virtual) stage. With CP (``split``) ``s`` is this rank's columns."""
        ids, attention, pos, mask = y["input_ids"], y["attention_mask"], y["position_ids"], None
        if split is not None:
            ids, pos, mask = split.local(ids), split.local(pos), split.mask(attention)
        b, s = ids.shape
        s = s // self.topo.tp if self.sp else s  # sequence parallelism: this rank's share of the columns
        out = []
        for v, chunk in enumerate(self.chunks):
            h_in = self.pipe.recv_forward((s, b, self.shape.hidden), self.device) if self.pipe.receives(v) else None
            h = mmodel.stage_hidden(chunk, ids, attention, pos, h_in, mask=mask)
            if self.pipe.sends(v):
                self.pipe.send_forward(h)
            out.append((h_in, h))
        return out

    def _log_probs_head(self, h: torch.Tensor, y, temperature: float, with_entropy: bool, entropy_grad: bool, cut: int, split=None):
        R = y["responses"].shape[1]
        # CP: this rank's columns that predict a response token (their labels: the next tokens), gathered after
        picked = split.predicting(R) if split is not None else None
        logits = mmodel.local_logits(self.chunks[-1], h[-R - 1 : -1] if split is None else h.index_select(0, picked))
        labels = y["responses"] if split is None else split.labels(y["input_ids"], y["responses"]).index_select(1, picked)
        if temperature != 1.0:
            logits = logits / temperature
        lp, ent = mmodel.vocab_parallel_log_probs(logits, labels, with_entropy=with_entropy, entropy_grad=entropy_grad, group=parallel.tp_group())
        if split is not None:
            lp = split.response(lp, R, picked)
            ent = split.response(ent, R, picked) if ent is not None else None
        if cut:
            lp = torch.nn.functional.pad(lp, (0, cut))
            ent = torch.nn.functional.pad(ent, (0, cut)) if ent is not None else None
        return lp, ent

    def forward(self, x: dict[str, torch.Tensor], *, temperature: float, with_entropy: bool, entropy_grad: bool, training: bool) -> Heads | None:
        """This rank's stage; the heads on the last stage. Inference: broadcast to every stage; training: None on the
        other stages, which keep their ``(h_in, h)`` for :meth:`backward`.

        ``actor.router_replay`` (:mod:`rl_train_megatron.router_replay`): the batch's ``routed_experts`` (R3: the
        rollout's; R2: the old-log-prob pass's) are forced in this forward and kept for its backward (activation
        recomputation); R2's old-log-prob pass records them (``Heads.routed_experts`` on every rank)."""
        if self.stage is not None and not self.stage.running:  # train.options.fully_shard: inside the root FSDP unit
            inner = type(self).forward.__get__(self)  # (the class's: a wrapper set on the instance sees one call per micro-batch)
            return self.stage.heads(inner, x, temperature=temperature, with_entropy=with_entropy, entropy_grad=entropy_grad, training=training)
        rr = self.router_replay
        if rr is None:
            return self._forward(x, temperature=temperature, with_entropy=with_entropy, entropy_grad=entropy_grad, training=training)
        action = "replay" if "routed_experts" in x else None
        if action is None and self.config.actor.router_replay == "R3":
            raise rr_mod.RouterReplayError("actor.router_replay=R3 but the batch has no routed_experts: the rollout engine returned none "
                                           "(rollout.return_routed_experts=true with a rollout backend that records them)")
        if action is None and not training:  # R2's old-log-prob pass
            action = "record"
        # else R2 on-policy without an old-log-prob pass: this forward is the one R2 would record; it routes natively
        if action == "replay":
            rr.check(x["routed_experts"], x["input_ids"])
        elif action == "record":
            rr.start_recording()
        try:
            heads = self._forward(x, temperature=temperature, with_entropy=with_entropy, entropy_grad=entropy_grad, training=training, replay=action)
            if action == "record":
                groups = (parallel.tp_cp_group() if self.sp or self.topo.cp > 1 else None, parallel.pp_group() if self.topo.pp > 1 else None)
                routed = rr.recorded(self._tokens, tuple(x["input_ids"].shape), groups)
                routed[~x["attention_mask"].bool().to(routed.device)] = rr_mod.NO_ROUTE  # (padding: no recorded routing)
                heads = attrs.evolve(heads, routed_experts=routed)
            return heads
        finally:
            if not training:  # (training: kept for the backward's recomputation, dropped there)
                rr.stop()

    def _forward(self, x: dict[str, torch.Tensor], *, temperature: float, with_entropy: bool, entropy_grad: bool, training: bool,
                 replay: str | None = None) -> Heads | None:
        critic = self.role == "critic"
        tokens = rr_mod.TokenMap(*x["input_ids"].shape, self.device) if replay else None
        # MoE: no trim (every position goes through the routers and counts in their losses: the same positions whatever
        # the rank layout)
        y, cut = (x, 0) if critic or self.shape.moe else self._trim(x, x["responses"].shape[1])
        rows = y["input_ids"].shape[0]
        if self.topo.ep > 1:
            y = self._same_tokens_over_ep(y)
        if self.sp and self.topo.cp == 1:  # (with CP the split pads)
            y = seq_par.pad_columns(y, self.topo.tp)
        split = self._split(y)
        if tokens is not None:  # the batch position of each token this rank's routers see (rl_train_megatron.router_replay)
            tokens.fit(y)
            self._tokens = tokens.local(split, self.topo.tp, self.topo.tp_rank, self.sp)
            if replay == "replay":
                self.router_replay.replay(x["routed_experts"], self._tokens)
        if training and self.shape.moe:
            mmodel.fit_aux_loss_tracker(self.shape.layers)
        stages = self._run_stage(y, split)
        h_out = stages[-1][1]
        if training:
            self._pending = stages
        h = seq_par.gather_hidden(h_out) if self.sp and self.pipe.is_last else h_out
        if h.shape[1] != rows:  # the rows added for the expert-parallel group are dropped before the heads
            h = h[:, :rows]
            y = {k: v[:rows] for k, v in y.items()}
        if training:
            if self.shape.moe:
                mmodel.count_training_forward()
        heads = None
        if self.pipe.is_last:
            R = x["responses"].shape[1]
            if critic:
                if split is None:
                    heads = Heads(values=mmodel.values(self.chunks[-1], h[-R - 1 : -1]))
                else:
                    picked = split.predicting(R)
                    heads = Heads(values=split.response(mmodel.values(self.chunks[-1], h.index_select(0, picked)), R, picked))
            else:
                lp, ent = self._log_probs_head(h, y, temperature, with_entropy, entropy_grad, cut, split)
                heads = Heads(log_probs=lp, entropy=ent)
        if training:
            return heads
        shape = tuple(x["responses"].shape)
        if critic:
            return Heads(values=self.pipe.from_last(heads.values if heads else None, shape, self.device))
        lp = self.pipe.from_last(heads.log_probs if heads else None, shape, self.device)
        ent = self.pipe.from_last(heads.entropy if heads else None, shape, self.device) if with_entropy else None
        return Heads(log_probs=lp, entropy=ent)

    def backward(self, loss: torch.Tensor | None, weight: float) -> None:
        """The last (virtual) stage from the loss (summed over data-parallel ranks in :meth:`reduce_and_clip`), the
        others from the next stage's gradient; then on to the previous stage (chunks in reverse order)."""
        stages = self._pending
        self._pending = None
        try:
            self._backward(stages, loss, weight)
        finally:
            if self.router_replay is not None:  # the replayed routing was kept for activation recomputation
                self.router_replay.stop()

    def _backward(self, stages, loss: torch.Tensor | None, weight: float) -> None:
        if self.shape.moe:  # the routers' aux / z losses enter the gradient with this micro-batch's weight (megatron's scaler)
            mmodel.set_aux_loss_scale(weight, self.device)
        for v in reversed(range(len(stages))):
            h_in, h = stages[v]
            if loss is not None and not self.pipe.sends(v):
                (loss * weight).backward()
            else:
                h.backward(self.pipe.recv_backward(h))
            if h_in is not None:
                self.pipe.send_backward(h_in.grad)

    def reduce_and_clip(self, max_norm: float | None) -> float:
        """Tied-embedding copies summed (PP > 1), gradients summed over data-parallel ranks, the whole-model norm
        (:mod:`rl_train_megatron.grads`)."""
        if self.stage is not None:  # train.options.fully_shard: summed by FSDP's reduce-scatter in the backward
            return fully_sharded.reduce_and_clip(self, max_norm)
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

    def step_metrics(self) -> dict[str, float]:
        """MoE: ``<role>/moe/<loss>``, the routers' aux / z losses of the last mini-batch (mean over layers, micro-batches
        and data-parallel ranks), as megatron-core's tracker recorded them (unscaled: without their coefficients)."""
        return {f"{self.role}/{k}": v for k, v in (getattr(self, "_moe_metrics", {}) or {}).items()}

    def _tied_copy(self, name: str) -> bool:
        """The last stage's copy of the tied embedding (PP > 1; the LM head of its last model chunk, named
        ``output_layer.weight`` or ``<chunk>.output_layer.weight``): the same weight as the first stage's."""
        return self.shape.tied and self.topo.pp > 1 and (name == "output_layer.weight" or name.endswith(".output_layer.weight"))

    # -------------------------------------------------------------- weights
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

    # ----------------------------------------------------------- checkpoint
    def _layout(self) -> dict[str, Any]:
        t = self.topo
        out = {"role": self.role, "tp": t.tp, "pp": t.pp, "dp": t.dp, "world": t.world, **({"cp": t.cp} if t.cp > 1 else {})}
        if self.shape.moe:
            out.update(ep=t.ep, etp=t.etp)
        if self.zero is not None:
            out["distributed_optimizer"] = True
        if self.stage is not None:
            out["fully_shard"] = True
        if self.shape.stages and len(set(self.shape.stages)) > 1:  # uneven pipeline stages
            out["stages"] = list(self.shape.stages)
        if self.vpp > 1:
            out["vpp"] = self.vpp
        return out

    def save_checkpoint(self, path: str, scheduler: dict[str, Any] | None) -> None:
        """Per rank ``path/rank{r}.pt`` (plain tensors and numbers: loads with ``weights_only=True``) + ``megatron.json``.

        Each file holds this rank's parameter shards, its AdamW state, the LR
        scheduler's counters and the RNG state; ``megatron.json`` the layout
        (role, TP, PP, DP) that :meth:`load_checkpoint` checks.
        """
        root = Path(path)
        root.mkdir(parents=True, exist_ok=True)
        state = self.local_state_dict()
        if self.optimizer is not None:
            state["scheduler"] = scheduler
        state["rng"] = save_rng_state()
        save_tensors(state, str(root / f"rank{self.rank}.pt"))
        if self.rank == 0:
            (root / MANIFEST).write_text(json.dumps(self._layout(), indent=1))
        parallel.barrier()

    def load_checkpoint(self, path: str) -> dict[str, Any] | None:
        """Restore what :meth:`save_checkpoint` wrote (same role and layout; bit-identical); the scheduler state."""
        root = Path(path)
        if not (root / MANIFEST).is_file():
            raise FileNotFoundError(f"{self.role}: no Megatron checkpoint at {str(root)!r} (expected {MANIFEST} written by save_checkpoint)")
        saved = json.loads((root / MANIFEST).read_text())
        if saved != self._layout():
            raise CheckpointMismatchError(
                f"{self.role}: the checkpoint at {str(root)!r} was written with {saved}, this run has {self._layout()}; "
                "resume with the same train.tensor_model_parallel_size, pipeline size and number of processes"
            )
        state = safe_load(str(root / f"rank{self.rank}.pt"))
        saved_model = state.get("model") if isinstance(state, dict) else None
        params = dict(self.model.named_parameters())
        if not isinstance(saved_model, dict):
            raise CheckpointMismatchError(f"{self.role}: {root / f'rank{self.rank}.pt'} holds no model shards; the checkpoint is damaged")
        wrong = [n for n, p in params.items()
                 if not isinstance(saved_model.get(n), torch.Tensor) or saved_model[n].shape != fully_sharded.local(p).shape]
        if wrong:
            raise CheckpointMismatchError(
                f"{self.role}: the checkpoint at {str(root)!r} does not fit this model (missing or other shape: {wrong[:5]}); "
                "it was written for another model (model.path, its shape); resume with the config it was written under"
            )
        if self.stage is not None:  # this rank's shards of the parameters and of the AdamW state
            fully_sharded.load_local_state(self.model, self.optimizer, state)
            load_rng_state(state["rng"])
            parallel.barrier()
            return state.get("scheduler")
        with torch.no_grad():
            for name, p in params.items():
                p.copy_(saved_model[name])
        if self.optimizer is not None:
            self.optimizer.load_state_dict(state["optim"])  # the state follows its parameters' device
            if self.optimizer_offload or self.optimizer_cpu_offload:
                offload.move_optimizer_state(self.optimizer, torch.device("cpu"))
        load_rng_state(state["rng"])
        parallel.barrier()
        return state.get("scheduler")

    def local_state_dict(self) -> dict[str, Any]:
        """This rank's parameter shards and AdamW state (copies, plain data)."""
        if self.stage is not None:
            return fully_sharded.local_state(self.model, self.optimizer)
        out: dict[str, Any] = {"model": {n: p.detach().clone() for n, p in self.model.named_parameters()}}
        if self.optimizer is not None:
            out["optim"] = copy_state(self.optimizer.state_dict())
        return out

    def release(self) -> None:
        if not getattr(self, "_released", True):
            self._released = True
            parallel.release()

