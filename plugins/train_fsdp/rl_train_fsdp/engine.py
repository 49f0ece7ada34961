"""The FSDP2 train engine: one role (actor, critic or ref) of one worker process.

``build_engine(role, config, context)`` is the ``fsdp`` card's factory. The
engine follows :class:`rl_core.backends.TrainEngine` and adds
:meth:`FSDPEngine.set_total_steps`.

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
    when sharded, ``torch.autocast`` when not; no loss scaling for float16);
    the reference model, which never trains, is loaded in that dtype
    directly. Log-probs, entropies, values and losses are float32.

Batch sizes (all per rank, in sequences; the engine gets its rank's shard
of the whole step)
    ``update`` splits the shard into ``data.train_batch_size //
    <role>.ppo_mini_batch_size`` mini-batches (one optimizer step each),
    every mini-batch into micro-batches of ``<role>.ppo_micro_batch_size_per_gpu``
    sequences (gradient accumulation), and repeats that ``ppo_epochs`` times.
    Each micro-batch's loss is weighted by its share of the *global*
    mini-batch's tokens (``token-mean``) or sequences (``seq-mean-*``), summed
    over ranks, so the gradient, the loss and the gradient norm do not depend
    on how the batch is split over ranks and micro-batches.

Learning rate
    See :mod:`rl_train_fsdp.schedule`: the scheduler steps once per
    ``update()`` call; ``set_total_steps(n)`` gives it the number of calls.
"""

from __future__ import annotations

import contextlib
import math
import os
import warnings
from pathlib import Path
from typing import Any, Iterator

import torch
from rl_core.algorithms.zero_advantage import can_skip_zero_advantage_rows, rows_with_signal
from rl_core.backends import WorkerContext
from rl_core.batch import Batch
from rl_core.logprobs import DEFAULT_CHUNK as DEFAULT_LOGPROB_CHUNK
from rl_core.logprobs import forward_response_chunked
from rl_core.micro_batches import token_budget_groups
from rl_core.modeling import (
    check_model_path,
    compile_decoder_layers,
    forward_values,
    load_causal_lm,
    load_value_model,
    position_ids_from_mask,
    torch_dtype,
)
from rl_core.problems import UserError
from rl_core.trainer.checkpoint import check_dcp_metadata, safe_load
from rl_core.trainer.guard import first_non_finite_parameter, non_finite_error

from rl_train_fsdp import sharding
from rl_train_fsdp.schedule import LRSchedule

ROLES = ("actor", "critic", "ref")


class TrainSizeError(UserError, ValueError):
    """Batch sizes that do not fit together, or an unknown role: a config problem."""


def build_engine(role: str, config, context: WorkerContext) -> "FSDPEngine":
    """The ``fsdp`` card's factory: ``build_engine(role, config, context) -> TrainEngine``."""
    if role not in ROLES:
        raise TrainSizeError(f"unknown role {role!r}: the fsdp train backend provides {', '.join(ROLES)}")
    return FSDPEngine(role, config, context)


class FSDPEngine:
    def __init__(self, role: str, config, context: WorkerContext) -> None:
        if role not in ROLES:
            raise TrainSizeError(f"unknown role {role!r}: the fsdp train backend provides {', '.join(ROLES)}")
        self.role = role
        self.config = config
        self.context = context
        self.device = context.torch_device
        self.rank, self.world_size = sharding.rank_and_world()
        if context.world_size > 1 and not sharding.is_distributed():
            raise RuntimeError(
                f"world_size={context.world_size} but torch.distributed is not initialised in this process; "
                "the placement layer (rl_core.cluster) initialises it before building engines"
            )
        if sharding.is_distributed() and self.world_size != context.world_size:
            raise RuntimeError(f"the process group has {self.world_size} ranks but the worker context says {context.world_size}")
        self.sharded = sharding.is_distributed()
        # one prompt forward per group of responses; not under FSDP (see rl_core.shared_prompt);
        # by default on CPU only: on an H100 it measured no faster (bench/results/shared_prompt_h100.md)
        share = config.model.share_prompt_forward
        self.share_prompts = (self.device.type == "cpu" if share is None else bool(share)) and not self.sharded
        mcfg = config.model
        self.compute_dtype = torch_dtype(mcfg.dtype)
        self.trainable = role != "ref"
        if role == "critic":
            path, key = (config.critic.model_path or mcfg.path), ("critic.model_path" if config.critic.model_path else "model.path")
        else:
            path, key = mcfg.path, "model.path"
        check_model_path(path, key=key)  # random_init too: the config must be there
        load_dtype = torch.float32 if self.trainable else self.compute_dtype
        loader = load_value_model if role == "critic" else load_causal_lm
        model = loader(
            path,
            dtype=load_dtype,
            device="cpu",
            random_init=mcfg.random_init,
            override_config=mcfg.override_config,
            trust_remote_code=mcfg.trust_remote_code,
            seed=config.trainer.seed,
            key=key,
        )
        self.hf_config = model.config
        self.hf_class = type(model)
        if self.trainable and mcfg.enable_gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if mcfg.compile:
            compile_decoder_layers(model)
        if not self.trainable:
            model.requires_grad_(False)
        self.mixed_precision = self.trainable and self.compute_dtype != torch.float32
        if self.sharded:
            model = sharding.shard_model(model, self.device, param_dtype=self.compute_dtype if self.mixed_precision else None)
        else:
            model = model.to(self.device)
        self.model = model
        self.model.eval()

        self.optimizer = None
        self._schedule: LRSchedule | None = None
        self._scheduler = None
        if self.trainable:
            ocfg = self._role_cfg().optim
            # The fused AdamW kernel: the same update up to rounding. On CPU the default (per-parameter loop)
            # took 0.96 s a step for a 135M model, the fused kernel 0.05 s (2 cores, torch 2.13); on CUDA it
            # replaces foreach's several passes over the fp32 state (sharded too: DTensor parameters, as
            # torchtitan runs it). Not for sharded CPU runs (gloo tests keep torch's default there).
            fused = {"fused": True} if self.device.type == "cuda" or not self.sharded else {}
            self.optimizer = torch.optim.AdamW(
                [p for p in model.parameters() if p.requires_grad],
                lr=ocfg.lr,
                betas=tuple(ocfg.betas),
                eps=ocfg.eps,
                weight_decay=ocfg.weight_decay,
                **fused,
            )
            self._schedule = LRSchedule(ocfg, config.trainer.total_training_steps, section=f"{role}.optim")

    # ---------------------------------------------------------------- config
    def _role_cfg(self):
        return self.config.critic if self.role == "critic" else self.config.actor

    def _mini_micro_epochs(self) -> tuple[int, int, int]:
        """(prompts per mini-batch, sequences per micro-batch, epochs) for this role."""
        a, c = self.config.actor, self.config.critic
        if self.role == "critic":
            return (
                c.ppo_mini_batch_size or a.ppo_mini_batch_size,
                c.ppo_micro_batch_size_per_gpu or a.ppo_micro_batch_size_per_gpu,
                c.ppo_epochs or a.ppo_epochs,
            )
        return a.ppo_mini_batch_size, a.ppo_micro_batch_size_per_gpu, a.ppo_epochs

    def _inference_micro(self) -> int:
        a = self.config.actor
        if self.role == "critic":
            return self._mini_micro_epochs()[1]
        if self.role == "ref":
            return self.config.ref.log_prob_micro_batch_size_per_gpu or a.log_prob_micro_batch_size_per_gpu or self.config.rollout.log_prob_micro_batch_size_per_gpu or a.ppo_micro_batch_size_per_gpu
        return a.log_prob_micro_batch_size_per_gpu or self.config.rollout.log_prob_micro_batch_size_per_gpu or a.ppo_micro_batch_size_per_gpu

    def _autocast(self):
        if self.mixed_precision and not self.sharded:
            return torch.autocast(device_type=self.device.type, dtype=self.compute_dtype)
        return contextlib.nullcontext()

    # ------------------------------------------------------------- inputs
    def _inputs(self, batch: Batch, rows: slice | torch.Tensor, extra: tuple[str, ...] = ()) -> dict[str, torch.Tensor]:
        t = batch.tensors
        for key in ("input_ids", "attention_mask", "responses"):
            if key not in t.keys():
                raise KeyError(f"{self.role}: the batch has no {key!r} (fields: {sorted(batch.keys())})")
        out = {
            "input_ids": t["input_ids"][rows],
            "attention_mask": t["attention_mask"][rows],
            "responses": t["responses"][rows],
        }
        out["position_ids"] = t["position_ids"][rows] if "position_ids" in t.keys() else position_ids_from_mask(out["attention_mask"])
        if "response_mask" in t.keys():
            out["response_mask"] = t["response_mask"][rows]
        else:
            out["response_mask"] = out["attention_mask"][:, -out["responses"].shape[1] :]
        for key in extra:
            if key not in t.keys():
                raise KeyError(f"{self.role}.update needs {key!r} in the batch (fields: {sorted(batch.keys())})")
            out[key] = t[key][rows]
        return {k: v.to(self.device, non_blocking=True) for k, v in out.items()}

    def _micro_slices(self, rows: int, micro: int) -> list[slice]:
        """Micro-batch slices; every rank runs the same number of forwards (FSDP collectives must match).

        A rank with fewer rows repeats its last slice; the extra results are dropped.
        """
        mine = math.ceil(rows / micro)
        count = int(sharding.all_reduce(torch.tensor(mine, device=self.device), "max").item()) if self.sharded else mine
        slices = [slice(s, min(s + micro, rows)) for s in range(0, rows, micro)]
        return slices + [slices[-1]] * (count - mine)

    # ------------------------------------------------------------- inference
    @torch.no_grad()
    def compute_log_prob(self, batch: Batch, *, temperature: float = 1.0, with_entropy: bool = False) -> dict[str, torch.Tensor]:
        """``{"log_probs": [b, R], "entropy": [b, R]}`` (float32, CPU) in micro-batches.

        ``temperature <= 0`` (greedy) is taken as 1. Padded response
        positions hold the model's value for the pad token: mask them.
        """
        if self.role == "critic":
            raise RuntimeError("compute_log_prob is for the actor and ref roles; the critic has compute_values")
        temperature = 1.0 if temperature is None or temperature <= 0 else float(temperature)
        self.model.eval()
        rows = len(batch)
        if rows == 0:
            raise ValueError("compute_log_prob got an empty batch")
        n_real = math.ceil(rows / self._inference_micro())
        parts = self._token_budget_parts(batch) or [(sl, i < n_real) for i, sl in enumerate(self._micro_slices(rows, self._inference_micro()))]
        lps, ents = [], []
        for sl, real in parts:
            x = self._inputs(batch, sl)
            with self._autocast():
                lp, ent = self._forward_response(x, temperature, with_entropy)
            if real:
                lps.append(lp.float().cpu())
                if with_entropy:
                    ents.append(ent.float().cpu())
        out = {"log_probs": torch.cat(lps)}
        if with_entropy:
            out["entropy"] = torch.cat(ents)
        return out

    def _forward_response(self, x: dict[str, torch.Tensor], temperature: float, with_entropy: bool, *, entropy_grad: bool = True):
        # the LM head in chunks of tokens (rl_core.logprobs): no full-vocab float32 logits; model.logprob_chunk_size
        chunk = self.config.model.logprob_chunk_size
        chunk = (DEFAULT_LOGPROB_CHUNK if self.device.type != "cpu" else 0) if chunk is None else chunk
        return forward_response_chunked(
            self.model, x["input_ids"], x["attention_mask"], x["position_ids"], x["responses"],
            temperature=temperature, with_entropy=with_entropy, entropy_grad=entropy_grad, share_prompts=self.share_prompts,
            chunk_size=chunk,
        )

    def _token_budget_parts(self, batch: Batch) -> list[tuple[torch.Tensor, bool]] | None:
        """``(rows, real)`` per micro-batch formed by a token budget, or None when ``actor.use_dynamic_bsz`` is off.

        Actor and ref (log-probs and update): consecutive rows fill ``actor.ppo_max_token_len_per_gpu``
        tokens (rl_core.micro_batches); ranks then may differ in their count, so a rank with fewer repeats its
        last micro-batch with ``real=False`` (dropped, or weight 0 in the update: the FSDP collectives still match).
        """
        a = self.config.actor
        if self.role == "critic" or not a.use_dynamic_bsz:
            return None
        groups = token_budget_groups(batch.tensors["attention_mask"].sum(-1), a.ppo_max_token_len_per_gpu)
        count = int(sharding.all_reduce(torch.tensor(len(groups), device=self.device), "max").item()) if self.sharded else len(groups)
        return [(torch.tensor(groups[min(i, len(groups) - 1)]), i < len(groups)) for i in range(count)]

    @torch.no_grad()
    def compute_values(self, batch: Batch) -> torch.Tensor:
        """Critic values ``[b, R]`` (float32, CPU), in micro-batches of ``critic.ppo_micro_batch_size_per_gpu``."""
        if self.role != "critic":
            raise RuntimeError(f"compute_values is for the critic role, not {self.role!r}")
        self.model.eval()
        rows = len(batch)
        if rows == 0:
            raise ValueError("compute_values got an empty batch")
        micro = self._inference_micro()
        n_real = math.ceil(rows / micro)
        out = []
        for i, sl in enumerate(self._micro_slices(rows, micro)):
            x = self._inputs(batch, sl)
            with self._autocast():
                v = self._values(x)
            if i < n_real:
                out.append(v.float().cpu())
        return torch.cat(out)

    def _values(self, x: dict[str, torch.Tensor]) -> torch.Tensor:
        with warnings.catch_warnings():
            # FSDP2 warns that the token-classification output is a view; nothing here writes to it in place.
            warnings.filterwarnings("ignore", message=r"FSDP2-wrapped module .* returned a view tensor")
            return forward_values(self.model, x["input_ids"], x["attention_mask"], x["position_ids"], x["responses"].shape[1])

    # ---------------------------------------------------------------- update
    def set_total_steps(self, total: int) -> None:
        """The number of ``update()`` calls the run will make (for warmup ratios and decay)."""
        if total is None or int(total) <= 0:
            raise ValueError(f"set_total_steps needs a positive number of steps, got {total!r}")
        if self._schedule is None:
            return
        self._schedule.total_steps = int(total)
        if self._scheduler is not None:  # re-evaluate the current lr under the new total
            for group, base in zip(self.optimizer.param_groups, self._scheduler.base_lrs):
                group["lr"] = base * self._schedule(self._scheduler.last_epoch)

    @property
    def scheduler(self):
        if self._scheduler is None and self.optimizer is not None:
            self._scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, self._schedule)
        return self._scheduler

    def _split_sizes(self, rows: int) -> tuple[int, int, int, int]:
        """(mini-batches, rows per mini-batch, rows per micro-batch, epochs), with clear errors."""
        section = "critic" if self.role == "critic" else "actor"
        mini_prompts, micro, epochs = self._mini_micro_epochs()
        tbs = self.config.data.train_batch_size
        if not mini_prompts or tbs % mini_prompts or mini_prompts > tbs:
            raise TrainSizeError(
                f"data.train_batch_size={tbs} prompts must be a multiple of {section}.ppo_mini_batch_size={mini_prompts} "
                f"({tbs} % {mini_prompts} = {tbs % mini_prompts if mini_prompts else 'n/a'})"
            )
        n_mini = tbs // mini_prompts
        if rows % n_mini:
            raise TrainSizeError(
                f"{self.role} update: this rank's {rows} sequences cannot be split into {n_mini} mini-batches "
                f"(data.train_batch_size={tbs} / {section}.ppo_mini_batch_size={mini_prompts} = {n_mini}; {rows} % {n_mini} = {rows % n_mini})"
            )
        mini_rows = rows // n_mini
        if micro <= 0 or mini_rows % micro:
            divisors = [d for d in range(1, mini_rows + 1) if mini_rows % d == 0]
            raise TrainSizeError(
                f"{section}.ppo_micro_batch_size_per_gpu={micro} does not divide the per-rank mini-batch: "
                f"{rows} sequences on this rank / {n_mini} mini-batches = {mini_rows} sequences, {mini_rows} % {micro} = {mini_rows % micro if micro > 0 else 'n/a'}; "
                f"valid values: {', '.join(map(str, divisors))}"
            )
        return n_mini, mini_rows, micro, epochs

    def update(self, batch: Batch) -> dict[str, float]:
        """One PPO update of this role over ``batch`` (this rank's shard of the step); returns metrics.

        Metrics: ``loss`` (the role's total loss on the global mini-batch,
        averaged over mini-batches and epochs), ``grad_norm`` (before
        clipping, averaged over optimizer steps), ``lr``, and the loss
        functions' own metrics (``actor/pg_loss``, ``critic/vf_loss``, ...)
        averaged over micro-batches and ranks.
        """
        if not self.trainable:
            raise RuntimeError("the ref role does not train; update() is for the actor and critic")
        rows = len(batch)
        if self.sharded:  # every rank must agree, or the collectives below would hang
            lo = int(sharding.all_reduce(torch.tensor(rows, device=self.device), "min").item())
            hi = int(sharding.all_reduce(torch.tensor(rows, device=self.device), "max").item())
            if lo != hi:
                raise TrainSizeError(f"{self.role} update: ranks got different numbers of sequences ({lo} to {hi}); the controller must split the step evenly")
        n_mini, mini_rows, micro, epochs = self._split_sizes(rows)
        if self.role == "actor" and "old_log_probs" not in batch.tensors.keys() and (n_mini > 1 or epochs > 1):
            raise TrainSizeError(
                f"actor update without 'old_log_probs' is only valid on-policy (one mini-batch, one epoch), "
                f"got {n_mini} mini-batches x {epochs} epochs: compute old log-probs first"
            )
        cfg = self._role_cfg()
        temperature = batch.meta.get("temperature", self.config.rollout.temperature)
        temperature = 1.0 if temperature is None or temperature <= 0 else float(temperature)
        scheduler = self.scheduler
        lr = self.optimizer.param_groups[0]["lr"]
        self.model.train()
        sums: dict[str, float] = {}
        counts: dict[str, int] = {}
        losses, norms = [], []
        for epoch in range(epochs):
            if getattr(cfg, "shuffle", False):
                gen = torch.Generator().manual_seed(self.config.trainer.seed + 1000 * scheduler.last_epoch + epoch)
                order = torch.randperm(rows, generator=gen)
            else:
                order = torch.arange(rows)
            for k in range(n_mini):
                idx = order[k * mini_rows : (k + 1) * mini_rows]
                loss, norm, metrics = self._mini_batch_step(batch.index(idx), micro, cfg, temperature)
                losses.append(loss)
                norms.append(norm)
                for name, value in metrics.items():
                    sums[name] = sums.get(name, 0.0) + value
                    counts[name] = counts.get(name, 0) + 1
        scheduler.step()
        self.model.eval()
        out = {name: sums[name] / counts[name] for name in sums}
        out.update(loss=sum(losses) / len(losses), grad_norm=(sum(norms) / len(norms)) if norms else float("nan"), lr=lr)
        return out

    def _count(self, mask: torch.Tensor, mode: str) -> torch.Tensor:
        m = mask.bool()
        if mode == "token-mean":
            return m.sum().to(torch.float64)
        return m.any(dim=-1).sum().to(torch.float64)

    def _mini_batch_step(self, mini: Batch, micro: int, cfg, temperature: float) -> tuple[float, float, dict[str, float]]:
        mode = cfg.loss_agg_mode
        # On-policy (one mini-batch, one epoch; checked in update): without 'old_log_probs' the
        # old policy is the current one, so old = log_prob.detach() and the ratio is exactly 1.
        # This saves the controller a forward pass; entropy then comes from this forward.
        on_policy = self.role == "actor" and "old_log_probs" not in mini.tensors.keys()
        extra = ("values", "returns") if self.role == "critic" else (("advantages",) if on_policy else ("old_log_probs", "advantages"))
        use_kl = self.role == "actor" and cfg.use_kl_loss
        if use_kl:
            extra = extra + ("ref_log_prob",)
        if self.role == "actor" and "rollout_is_weights" in mini.tensors.keys():
            extra = extra + ("rollout_is_weights",)  # rollout correction (algorithm.rollout_correction)
        want_entropy = self.role == "actor" and (cfg.entropy_coeff != 0 or on_policy)
        mask_all = mini.tensors["response_mask"] if "response_mask" in mini.tensors.keys() else None
        if mask_all is None:
            raise KeyError(f"{self.role}.update needs 'response_mask' in the batch")
        global_den = sharding.all_reduce(self._count(mask_all, mode).to(self.device), "sum")
        global_den = float(global_den)
        if self.role == "actor" and not self.sharded and can_skip_zero_advantage_rows(cfg):
            # after the normaliser (global_den) is fixed: the same gradient, fewer rows to run
            keep = rows_with_signal(mini.tensors["advantages"], mask_all)
            if len(keep) < len(mini):
                mini = mini.index(keep) if len(keep) else None
        self.optimizer.zero_grad(set_to_none=True)
        loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        metric_sums: dict[str, torch.Tensor] = {}
        n_micro = 0
        parts = [] if mini is None else self._token_budget_parts(mini) or [(slice(s, s + micro), True) for s in range(0, len(mini), micro)]
        for rows, real in parts:
            x = self._inputs(mini, rows, extra)
            with self._autocast():
                if self.role == "critic":
                    from rl_core.algorithms.actor_loss import compute_critic_loss

                    vpreds = self._values(x)
                    loss, metrics = compute_critic_loss(
                        vpreds=vpreds, values=x["values"], returns=x["returns"], response_mask=x["response_mask"], cfg=cfg
                    )
                else:
                    from rl_core.algorithms.actor_loss import compute_actor_loss

                    log_prob, entropy = self._forward_response(x, temperature, want_entropy, entropy_grad=cfg.entropy_coeff != 0)
                    loss, metrics = compute_actor_loss(
                        log_prob=log_prob,
                        old_log_prob=log_prob.detach() if on_policy else x["old_log_probs"],
                        advantages=x["advantages"],
                        response_mask=x["response_mask"],
                        entropy=entropy,
                        ref_log_prob=x.get("ref_log_prob"),
                        rollout_is_weights=x.get("rollout_is_weights"),
                        cfg=cfg,
                    )
            share = float(self._count(x["response_mask"], mode)) / global_den if global_den > 0 else 0.0
            if mode == "token-sum":  # no normaliser: the micro-batch sums add up to the global sum
                share = 1.0
            if not real:  # a repeat that only keeps this rank's collectives in step (use_dynamic_bsz)
                share = 0.0
            # FSDP2 averages gradients over ranks: multiply by the world size so the result is the global loss's gradient.
            (loss * (share * self.world_size)).backward()
            if not real:
                continue
            loss_sum += loss.detach().to(torch.float64) * share
            for name, value in metrics.items():
                metric_sums[name] = metric_sums.get(name, 0.0) + value.detach().to(torch.float64)
            n_micro += 1
        if not parts:  # every row skipped: a zero gradient, so AdamW still steps (momentum) as it would have
            for p in self.model.parameters():
                if p.requires_grad:
                    p.grad = torch.zeros_like(p)
        grad_norm = sharding.clip_grad_norm(list(self.model.parameters()), self._role_cfg().optim.grad_clip)
        loss_total = float(sharding.all_reduce(loss_sum, "sum"))
        # the numerical guard (rl_core.trainer.guard): both numbers are global, so every rank stops alike
        stage = f"update_{self.role}"
        if not math.isfinite(loss_total):
            self.optimizer.zero_grad(set_to_none=True)
            raise non_finite_error(stage=stage, role=self.role, rank=self.rank, tensor="loss", detail=f"loss = {loss_total}")
        if not math.isfinite(grad_norm):
            self.optimizer.zero_grad(set_to_none=True)
            raise non_finite_error(stage=stage, role=self.role, rank=self.rank, tensor="gradient norm", detail=f"grad_norm = {grad_norm}")
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self._check_weights(stage)
        names = sorted(metric_sums)
        if names:
            stacked = torch.stack([metric_sums[n] / n_micro for n in names]).to(self.device)
            stacked = sharding.all_reduce(stacked, "avg")
            metrics_out = {n: float(v) for n, v in zip(names, stacked.tolist())}
        else:
            metrics_out = {}
        return loss_total, grad_norm, metrics_out

    def _check_weights(self, stage: str) -> None:
        """After an optimizer step: stop (on every rank) if any weight became NaN / inf.

        The weights in memory are lost then; the run stops, and the last checkpoint (written
        before this step) is what a rerun resumes from.
        """
        bad = first_non_finite_parameter(self.model)
        flag = torch.tensor(0.0 if bad is None else 1.0, device=self.device)
        if self.sharded:
            flag = sharding.all_reduce(flag, "sum")
        if float(flag) == 0:
            return
        raise non_finite_error(
            stage=stage, role=self.role, rank=self.rank, tensor=f"weight {bad}" if bad else "weights (on another rank)",
            detail="after the optimizer step",
        )

    # ------------------------------------------------------------- weights
    def named_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """Full HF-named tensors on every rank, one at a time (all ranks must drain it).

        Float32 for actor / critic (the master weights), the load dtype for
        ref. Sharded: each is a fresh all-gathered tensor; unsharded: a
        detached view of the parameter itself (no copy: copy it if you keep
        it past the next update). Tied weights are yielded once (HF
        checkpoint convention).
        """
        return sharding.iter_full_weights(self.model)

    def save_hf(self, path: str) -> None:
        """A normal HF folder at ``path`` (rank 0 writes; every rank must call)."""
        state: dict[str, torch.Tensor] = {}
        for name, t in self.named_weights():
            if self.rank == 0:
                state[name] = t.detach().to("cpu", copy=True).contiguous()
        if self.rank == 0:
            _write_hf_folder(Path(path), state, self.hf_config, self.hf_class, self.model, self.config)
        sharding.barrier()

    # ----------------------------------------------------------- checkpoint
    def save_checkpoint(self, path: str) -> None:
        """Sharded model + optimizer state (torch.distributed.checkpoint), scheduler and RNG per rank.

        ``path/dcp/`` holds the DCP checkpoint (loadable on another number of
        ranks); ``path/extra_rank{r}.pt`` the scheduler and RNG state as
        tensors and plain data (the schedule itself is rebuilt from the
        config, not pickled), read back with ``weights_only=True``.
        """
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_state_dict

        root = Path(path)
        if self.rank == 0:
            root.mkdir(parents=True, exist_ok=True)
        sharding.barrier()
        if self.optimizer is not None:
            model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
            state = {"model": model_sd, "optim": optim_sd}
        else:
            state = {"model": get_model_state_dict(self.model)}
        with _quiet_dcp():
            dcp.save(state, checkpoint_id=str(root / "dcp"))
        extra = {
            "role": self.role,
            "world_size": self.world_size,
            "scheduler": _plain_scheduler_state(self.scheduler) if self.optimizer is not None else None,
            "rng": _rng_state(self.device),
        }
        torch.save(extra, root / f"extra_rank{self.rank}.pt")
        sharding.barrier()

    def load_checkpoint(self, path: str) -> None:
        """Restore what :meth:`save_checkpoint` wrote (bit-identical on the same number of ranks)."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_state_dict, set_model_state_dict, set_state_dict

        root = Path(path)
        if not (root / "dcp").is_dir():
            raise FileNotFoundError(f"{self.role}: no checkpoint at {str(root)!r} (expected {str(root / 'dcp')!r} written by save_checkpoint)")
        check_dcp_metadata(str(root / "dcp"))  # torch unpickles it: refuse anything but its own classes first
        if self.optimizer is not None:
            model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
            state = {"model": model_sd, "optim": optim_sd}
            with _quiet_dcp():
                dcp.load(state, checkpoint_id=str(root / "dcp"))
            set_state_dict(self.model, self.optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
        else:
            state = {"model": get_model_state_dict(self.model)}
            with _quiet_dcp():
                dcp.load(state, checkpoint_id=str(root / "dcp"))
            set_model_state_dict(self.model, state["model"])
        extra_path = root / f"extra_rank{self.rank}.pt"
        if not extra_path.is_file():  # resumed on more ranks than saved: take rank 0's scheduler, keep fresh RNG
            extra_path, restore_rng = root / "extra_rank0.pt", False
        else:
            restore_rng = True
        extra = safe_load(str(extra_path))
        if self.optimizer is not None and extra.get("scheduler") is not None:
            total = self._schedule.total_steps
            self.scheduler.load_state_dict({**extra["scheduler"], "lr_lambdas": [None] * len(self.optimizer.param_groups)})
            if total:  # a total given to this run wins over the saved one
                self._schedule.total_steps = total
        if restore_rng:
            _set_rng_state(extra["rng"], self.device)
        sharding.barrier()

    def local_state_dict(self) -> dict[str, Any]:
        """This rank's shards of the model and optimizer state and the scheduler state, as plain tensors (copies).

        For tests and debugging: two engines with equal ``local_state_dict()``
        on every rank are in the same training state.
        """
        out: dict[str, Any] = {"model": {n: sharding.local_tensor(p.detach()).clone() for n, p in self.model.named_parameters()}}
        if self.optimizer is not None:
            out["optim"] = _to_local(self.optimizer.state_dict())
            out["scheduler"] = self.scheduler.state_dict()
        return out

    def shutdown(self) -> None:
        self.optimizer = None
        self._scheduler = None
        self.model = None
        if self.device.type == "cuda":
            torch.cuda.empty_cache()


@contextlib.contextmanager
def _quiet_dcp():
    """DCP warns that it 'assumes a single process' when there is no process group: that is the intent here."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"torch\.distributed is disabled, unavailable or uninitialized")
        yield


def _to_local(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return sharding.local_tensor(obj).detach().clone()
    if isinstance(obj, dict):
        return {k: _to_local(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_local(v) for v in obj)
    return obj


def _plain_scheduler_state(scheduler) -> dict[str, Any]:
    """The ``LambdaLR`` state without ``lr_lambdas`` (the schedule object, rebuilt from the config on load)."""
    return {k: v for k, v in scheduler.state_dict().items() if k != "lr_lambdas"}


def _rng_state(device: torch.device) -> dict[str, Any]:
    state: dict[str, Any] = {"cpu": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def _set_rng_state(state: dict[str, Any], device: torch.device) -> None:
    torch.set_rng_state(state["cpu"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


def _write_hf_folder(path: Path, state: dict[str, torch.Tensor], hf_config, hf_class, model, config) -> None:
    """config.json (+ generation config, tokenizer) and safetensors shards, as ``save_pretrained`` writes them."""
    import copy

    from huggingface_hub import save_torch_state_dict

    path.mkdir(parents=True, exist_ok=True)
    cfg = copy.deepcopy(hf_config)
    cfg.architectures = [hf_class.__name__]  # not the FSDP wrapper class
    cfg.save_pretrained(str(path))
    gen = getattr(model, "generation_config", None)
    if gen is not None and hf_class.__name__.endswith("ForCausalLM"):
        try:
            gen.save_pretrained(str(path))
        except Exception:  # noqa: BLE001 - an odd generation config must not lose the weights
            pass
    save_torch_state_dict(state, str(path), max_shard_size="5GB")
    tok_dir = config.model.tokenizer_path or config.model.path
    if tok_dir and os.path.isdir(tok_dir):
        try:
            from rl_core.modeling import load_tokenizer

            load_tokenizer(tok_dir).save_pretrained(str(path))
        except Exception:  # noqa: BLE001 - a folder without a tokenizer is still a model
            pass
