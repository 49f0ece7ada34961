"""The Megatron train engine: one role (actor, critic or ref) of one worker process.

``build_engine(role, config, context)`` is the ``megatron`` card's factory.
The engine follows :class:`rl_core.backends.TrainEngine`.

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

Models
    Built from the HF config (:mod:`rl_train_megatron.model`); weights from
    the HF checkpoint (or ``model.random_init`` under ``trainer.seed``, the
    same on every rank), converted and sliced for this rank. The critic is the
    backbone plus a scalar ``value_head`` (HF ``*ForTokenClassification``'s
    ``score``), as in the fsdp backend.

Numbers
    Parameters, AdamW state, log-probs, entropies, values and losses are
    float32. ``model.dtype=bfloat16`` / ``float16`` computes under
    ``torch.autocast`` on a GPU; on the CPU the engine computes in float32.
    Log-probs / entropy come from each TP rank's vocabulary slice
    (:func:`rl_train_megatron.model.vocab_parallel_log_probs`).

Batches, losses and the LR schedule come from the core
(:class:`rl_core.train_engine.base.TrainEngineBase`, which the fsdp backend's
engine extends too; this class adds the model, forward passes, the
pipelined mini-batch step, gradient reduction, weights and checkpoints):
losses from :func:`rl_core.algorithms.actor_loss.compute_actor_loss` /
``compute_critic_loss``, weighted by the global (data-parallel) token count
of each mini-batch, so results do not depend on TP, DP or micro-batching.

Optimizer
    ``torch.optim.AdamW`` over this rank's parameter shards, on CPU and GPU
    (megatron-core's optimizers and ``clip_grads`` assert CUDA tensors);
    the gradient norm is taken over the whole model (TP-sharded tensors
    summed over the TP group, replicated ones counted once) and clipped
    as ``torch.nn.utils.clip_grad_norm_`` does.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Iterator

import torch
import torch.distributed as dist
from rl_core.backends import WorkerContext
from rl_core.modeling import response_columns_in_use
from rl_core.problems import UserError
from rl_core.train_engine.base import TrainEngineBase
from rl_core.train_engine.hf_export import write_hf_folder
from rl_core.trainer.checkpoint import load_rng_state, safe_load, save_rng_state, save_tensors

from rl_train_megatron import convert, parallel
from rl_train_megatron import model as mmodel
from rl_train_megatron.pipeline import Pipe
from rl_train_megatron.weights import gather_hf_weights, stage_layout

MANIFEST = "megatron.json"


class CheckpointMismatchError(UserError, RuntimeError):
    """A checkpoint written with another role or parallel layout."""


def build_engine(role: str, config, context: WorkerContext) -> "MegatronEngine":
    """The ``megatron`` card's factory: ``build_engine(role, config, context) -> TrainEngine``."""
    return MegatronEngine(role, config, context)


class MegatronEngine(TrainEngineBase):
    backend = "megatron"

    def __init__(self, role: str, config, context: WorkerContext) -> None:
        super().__init__(role, config, context)
        tp, pp = config.train.tensor_model_parallel_size, config.train.pipeline_model_parallel_size
        hf, key = self._load_hf_model(torch.float32)
        self.hf_config, self.hf_class = hf.config, type(hf)
        self.generation_config = getattr(hf, "generation_config", None)
        self.shape = mmodel.model_shape(hf.config, critic=role == "critic", key=key)
        mmodel.check_divisible(self.shape, tp, pp)
        if context.world_size > 1 and not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError(f"world_size={context.world_size} but torch.distributed is not initialised in this process")
        self.topo = parallel.acquire(tp, pp, self.device)
        self._released = False
        self.rank, self.world_size = self.topo.rank, self.topo.world
        if context.world_size > 1 and self.world_size != context.world_size:
            raise RuntimeError(f"the process group has {self.world_size} ranks but the worker context says {context.world_size}")
        self.sharded = self.world_size > 1
        self.pipe = Pipe(parallel.pp_group(), pp, self.topo.pp_rank)
        self._stage_layout = None
        self.mixed_precision = self.device.type == "cuda" and self.compute_dtype != torch.float32
        self.autocast_dtype = self.compute_dtype if self.mixed_precision else None  # on the CPU: float32

        full = convert.hf_to_full(hf.state_dict(), self.shape)
        del hf
        local = convert.split_for_rank(full, self.shape, tp, self.topo.tp_rank, pp, self.topo.pp_rank)
        del full
        model = mmodel.build_model(self.shape, self.hf_config, tp, pp)
        load_local_state(model, local)
        if not self.trainable:
            model.requires_grad_(False)
        self.model = model.to(self.device)
        self.model.eval()
        if self.trainable:
            self._init_optimizer()

    def _all_reduce(self, value: torch.Tensor, op: str) -> torch.Tensor:
        return parallel.all_reduce(value, op)

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

    # Every forward runs this rank's pipeline stage (:meth:`_run_stage`); the heads (log-probs, values) run on the
    # last stage. Inference results are broadcast from the last stage; the update back-propagates stage by stage.
    def _run_stage(self, y: dict[str, torch.Tensor]) -> tuple[torch.Tensor | None, torch.Tensor]:
        """``(input hidden leaf or None, this stage's output [s, b, h])``; sends the output on to the next stage."""
        h_in = None
        if not self.pipe.is_first:
            b, s = y["input_ids"].shape
            h_in = self.pipe.recv_forward((s, b, self.shape.hidden), self.device)
        h = mmodel.stage_hidden(self.model, y["input_ids"], y["attention_mask"], y["position_ids"], h_in)
        if not self.pipe.is_last:
            self.pipe.send_forward(h)
        return h_in, h

    def _log_probs_head(self, h: torch.Tensor, y, temperature: float, with_entropy: bool, entropy_grad: bool, cut: int):
        R = y["responses"].shape[1]
        logits = mmodel.local_logits(self.model, h[-R - 1 : -1])
        if temperature != 1.0:
            logits = logits / temperature
        lp, ent = mmodel.vocab_parallel_log_probs(logits, y["responses"], with_entropy=with_entropy, entropy_grad=entropy_grad, group=parallel.tp_group())
        if cut:
            lp = torch.nn.functional.pad(lp, (0, cut))
            ent = torch.nn.functional.pad(ent, (0, cut)) if ent is not None else None
        return lp, ent

    def _forward_response(self, x: dict[str, torch.Tensor], temperature: float, with_entropy: bool, *, entropy_grad: bool = True):
        """Inference: ``(log_probs, entropy or None)`` ``[b, R]`` on every stage."""
        y, cut = self._trim(x, x["responses"].shape[1])
        _, h = self._run_stage(y)
        lp = ent = None
        if self.pipe.is_last:
            lp, ent = self._log_probs_head(h, y, temperature, with_entropy, entropy_grad, cut)
        shape = tuple(x["responses"].shape)
        lp = self.pipe.from_last(lp, shape, self.device)
        if with_entropy:
            ent = self.pipe.from_last(ent, shape, self.device)
        return lp, ent

    def _values(self, x: dict[str, torch.Tensor]) -> torch.Tensor:
        """Inference: critic values ``[b, R]`` on every stage."""
        R = x["responses"].shape[1]
        _, h = self._run_stage(x)
        v = mmodel.values(self.model, h[-R - 1 : -1]) if self.pipe.is_last else None
        return self.pipe.from_last(v, tuple(x["responses"].shape), self.device)

    # --------------------------------------------------------------- update
    def _micro_loss(self, x, cfg, temperature: float, on_policy: bool, want_entropy: bool):
        """This micro-batch's stage forward; on the last stage also the role's loss. ``(h_in, h, loss, metrics)``."""
        if self.role == "critic":
            y, cut = x, 0
        else:
            y, cut = self._trim(x, x["responses"].shape[1])
        h_in, h = self._run_stage(y)
        if not self.pipe.is_last:
            return h_in, h, None, {}
        if self.role == "critic":
            R = x["responses"].shape[1]
            loss, metrics = self._critic_loss(x, mmodel.values(self.model, h[-R - 1 : -1]), cfg)
            return h_in, h, loss, metrics
        log_prob, entropy = self._log_probs_head(h, y, temperature, want_entropy, cfg.entropy_coeff != 0, cut)
        loss, metrics = self._actor_loss(x, log_prob, entropy, cfg, on_policy)
        return h_in, h, loss, metrics

    def _mini_batch_step(self, mini, micro: int, cfg, temperature: float) -> tuple[float, float, dict[str, float]]:
        mode = cfg.loss_agg_mode
        on_policy, extra, want_entropy = self._loss_fields(mini, cfg)
        dp = parallel.dp_group()
        global_den = float(parallel.all_reduce(self._count(mini.tensors["response_mask"], mode).to(self.device), "sum", dp))
        self.optimizer.zero_grad(set_to_none=True)
        loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        metric_sums: dict[str, torch.Tensor] = {}
        n_micro = 0
        for s in range(0, len(mini), micro):
            x = self._inputs(mini, slice(s, s + micro), extra)
            with self._autocast():
                h_in, h, loss, metrics = self._micro_loss(x, cfg, temperature, on_policy, want_entropy)
            if loss is not None:  # the last stage
                share = self._micro_share(x["response_mask"], mode, global_den)
                (loss * share).backward()  # summed over data-parallel ranks below: the global mini-batch's gradient
                loss_sum += loss.detach().to(torch.float64) * share
                for name, value in metrics.items():
                    metric_sums[name] = metric_sums.get(name, 0.0) + value.detach().to(torch.float64)
            else:
                h.backward(self.pipe.recv_backward(h))
            if h_in is not None:
                self.pipe.send_backward(h_in.grad)
            n_micro += 1
        self._reduce_tied_embedding_grads()
        params = [p for p in self.model.parameters() if p.grad is not None]
        reduce_grads(params, dp)
        grad_norm = self._clip_grad_norm(self._role_cfg().optim.grad_clip)
        metrics_out = self._mean_metrics(metric_sums, n_micro, lambda t: parallel.all_reduce(t, "avg", dp))
        loss_total, metrics_out = self.pipe.object_from_last((float(parallel.all_reduce(loss_sum, "sum", dp)), metrics_out))
        self._optimizer_step(loss_total, grad_norm)  # both numbers are global: every rank stops alike
        return loss_total, grad_norm, metrics_out

    def _tied_copy(self, name: str) -> bool:
        """The last stage's copy of the tied embedding (PP > 1): the same weight as the first stage's."""
        return self.shape.tied and self.topo.pp > 1 and not self.model.pre_process and name == "output_layer.weight"

    def _reduce_tied_embedding_grads(self) -> None:
        """PP > 1 with tied embeddings: first and last stage add up their gradients of the shared weight."""
        from megatron.core import parallel_state as mpu

        if not (self.shape.tied and self.topo.pp > 1 and mpu.is_rank_in_embedding_group()):
            return
        weight = self.model.shared_embedding_or_output_weight()
        if weight.grad is None:
            weight.grad = torch.zeros_like(weight)
        dist.all_reduce(weight.grad, group=mpu.get_embedding_group())

    def _clip_grad_norm(self, max_norm: float | None) -> float:
        """Whole-model L2 norm of the gradients; clips them to ``max_norm`` (> 0) as ``clip_grad_norm_`` does.

        TP-sharded tensors count on every TP rank, replicated ones on TP rank 0,
        the tied embedding once (on the first stage); summed over TP x PP.
        """
        sq = torch.zeros((), dtype=torch.float32, device=self.device)
        grads = []
        for name, p in self.model.named_parameters():
            if p.grad is None:
                continue
            grads.append(p.grad)
            if (convert.split_dim(name) is not None or self.topo.tp_rank == 0) and not self._tied_copy(name):
                sq += p.grad.detach().float().pow(2).sum()
        sq = parallel.all_reduce(sq, "sum", parallel.mp_group())
        norm = float(sq.sqrt())
        if grads and math.isfinite(norm) and max_norm is not None and max_norm > 0:
            coef = min(1.0, max_norm / (norm + 1e-6))
            torch._foreach_mul_(grads, coef)
        return norm

    # -------------------------------------------------------------- weights
    def _global_params(self) -> list[tuple[str, torch.Tensor]]:
        offset = convert.stage_layers(self.shape, self.topo.pp, self.topo.pp_rank).start
        return [(convert.global_name(n, offset), p.detach()) for n, p in self.model.named_parameters() if not self._tied_copy(n)]

    def named_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """Full HF-named float32 tensors on every rank, in buckets: broadcast over PP, all-gathered over TP.

        Every rank must drain it. With TP 1 and PP 1 the tensors that need no
        re-layout are detached views of the parameters (copy them to keep them
        past the next update).
        """
        bucket_mb = float(self.config.train.options.get("weight_bucket_mb", 256))
        params = self._global_params()
        if self._stage_layout is None:
            self._stage_layout = stage_layout(params, parallel.pp_group())
        return gather_hf_weights(
            params, self.shape, parallel.tp_group(), pp_group=parallel.pp_group(), layout=self._stage_layout, bucket_bytes=int(bucket_mb * 2**20)
        )

    def save_hf(self, path: str) -> None:
        """A normal HF folder at ``path`` (rank 0 writes; every rank must call)."""
        state = {}
        for name, t in self.named_weights():
            if self.rank == 0:
                state[name] = t.detach().to("cpu", copy=True).contiguous()
        if self.rank == 0:
            write_hf_folder(Path(path), state, self.hf_config, self.hf_class, self.generation_config, self.config)
        parallel.barrier()

    # ----------------------------------------------------------- checkpoint
    def _layout(self) -> dict[str, Any]:
        t = self.topo
        return {"role": self.role, "tp": t.tp, "pp": t.pp, "dp": t.dp, "world": t.world}

    def save_checkpoint(self, path: str) -> None:
        """Per rank ``path/rank{r}.pt`` (plain tensors and numbers: loads with ``weights_only=True``) + ``megatron.json``.

        Each file holds this rank's parameter shards, its AdamW state, the LR
        scheduler's counters and the RNG state; ``megatron.json`` the layout
        (role, TP, PP, DP) that :meth:`load_checkpoint` checks.
        """
        root = Path(path)
        root.mkdir(parents=True, exist_ok=True)
        state = self.local_state_dict()
        state["rng"] = save_rng_state()
        save_tensors(state, str(root / f"rank{self.rank}.pt"))
        if self.rank == 0:
            (root / MANIFEST).write_text(json.dumps(self._layout(), indent=1))
        parallel.barrier()

    def load_checkpoint(self, path: str) -> None:
        """Restore what :meth:`save_checkpoint` wrote (same role and layout; bit-identical)."""
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
        wrong = [n for n, p in params.items() if not isinstance(saved_model.get(n), torch.Tensor) or saved_model[n].shape != p.shape]
        if wrong:
            raise CheckpointMismatchError(
                f"{self.role}: the checkpoint at {str(root)!r} does not fit this model (missing or other shape: {wrong[:5]}); "
                "it was written for another model (model.path, its shape); resume with the config it was written under"
            )
        with torch.no_grad():
            for name, p in params.items():
                p.copy_(saved_model[name])
        if self.optimizer is not None:
            self.optimizer.load_state_dict(state["optim"])
            self._load_scheduler_state(state["scheduler"])
        load_rng_state(state["rng"])
        parallel.barrier()

    def local_state_dict(self) -> dict[str, Any]:
        """This rank's parameter shards, AdamW state and scheduler counters (copies, plain data)."""
        out: dict[str, Any] = {"model": {n: p.detach().clone() for n, p in self.model.named_parameters()}}
        if self.optimizer is not None:
            out["optim"] = _clone(self.optimizer.state_dict())
            out["scheduler"] = self._scheduler_state()  # the schedule object itself comes from the config
        return out

    def _release(self) -> None:
        if not getattr(self, "_released", True):
            self._released = True
            parallel.release()


def load_local_state(model: torch.nn.Module, local: dict[str, torch.Tensor]) -> None:
    """Copy this rank's converted tensors into the model's parameters; every parameter exactly once."""
    params = dict(model.named_parameters())
    missing, extra = set(params) - set(local), set(local) - set(params)
    if missing or extra:
        raise convert.ConversionError(f"converted weights do not fit the Megatron model: missing {sorted(missing)[:6]}, unexpected {sorted(extra)[:6]}")
    with torch.no_grad():
        for name, p in params.items():
            if p.shape != local[name].shape:
                raise convert.ConversionError(f"{name}: converted shape {tuple(local[name].shape)} != model shape {tuple(p.shape)}")
            p.copy_(local[name])


def reduce_grads(params: list[torch.nn.Parameter], group) -> None:
    """Sum the gradients over the data-parallel group, one flat buffer per dtype."""
    if not params or dist.get_world_size(group) == 1:
        return
    from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

    grads = [p.grad for p in params]
    flat = _flatten_dense_tensors(grads)
    dist.all_reduce(flat, group=group)
    for g, new in zip(grads, _unflatten_dense_tensors(flat, grads)):
        g.copy_(new)


def _clone(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    if isinstance(obj, dict):
        return {k: _clone(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_clone(v) for v in obj)
    return obj
