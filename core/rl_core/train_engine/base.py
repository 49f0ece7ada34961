"""What every train engine shares: the update driver, batch splitting, inference loops, LR schedule, guard.

A train backend's ``factory(role, config, context)`` returns a subclass of
:class:`TrainEngineBase` (the fsdp and megatron plugins' engines are). The
base class drives everything that does not depend on how the model is split
over ranks; the subclass provides the model, its forward passes, the
mini-batch step (forward / backward, gradient reduction and clipping),
weights and checkpoints.

Batch sizes (all per rank, in sequences; the engine gets its rank's shard of the whole step)
    ``update`` splits the shard into ``data.train_batch_size //
    <role>.ppo_mini_batch_size`` mini-batches (one optimizer step each),
    every mini-batch into micro-batches of ``<role>.ppo_micro_batch_size_per_gpu``
    sequences (gradient accumulation), and repeats that ``ppo_epochs`` times
    (:mod:`rl_core.train_engine.batch_sizes`; ``<role>.shuffle``: a new order
    each epoch, the same on every rank). A subclass's mini-batch step weights
    each micro-batch's loss by its share of the *global* mini-batch's tokens
    (``token-mean``) or sequences (``seq-mean-*``) (:meth:`~TrainEngineBase._micro_share`),
    summed over ranks, so the gradient, the loss and the gradient norm do not
    depend on how the batch is split over ranks and micro-batches.

Inference
    ``compute_log_prob`` / ``compute_values`` run in micro-batches of the
    role's ``log_prob_micro_batch_size_per_gpu`` (or formed by a token budget,
    ``actor.use_dynamic_bsz``); every rank runs the same number of forwards,
    a rank with fewer rows repeating its last micro-batch and dropping the
    result, so the backend's collectives stay in step.

Learning rate
    :mod:`rl_core.train_engine.lr_schedule`: a ``LambdaLR`` that steps once
    per ``update()`` call; ``set_total_steps(n)`` gives it the number of calls.

Numerical guard (:mod:`rl_core.trainer.guard`)
    :meth:`~TrainEngineBase._optimizer_step` refuses a non-finite loss or
    gradient norm and checks the weights after the step, on every rank alike.

What a subclass provides
    ``backend`` (its card's name, for messages); in ``__init__``, after
    ``super().__init__(role, config, context)``: ``model``, ``rank``,
    ``world_size``, ``sharded`` (True when the ranks run collectives:
    then every rank takes part in each :meth:`~TrainEngineBase._all_reduce`
    below), ``autocast_dtype`` (``torch.autocast`` around forwards, or None)
    and, for a trainable role, :meth:`~TrainEngineBase._init_optimizer`.
    Methods: :meth:`~TrainEngineBase._all_reduce`,
    :meth:`~TrainEngineBase._forward_response`, :meth:`~TrainEngineBase._values`,
    :meth:`~TrainEngineBase._mini_batch_step` (helpers: ``_loss_fields``,
    ``_actor_loss``, ``_critic_loss``, ``_micro_share``, ``_mean_metrics``,
    ``_optimizer_step``), and the rest of :class:`rl_core.backends.TrainEngine`:
    ``named_weights``, ``save_hf``, ``save_checkpoint``, ``load_checkpoint``
    (``_scheduler_state`` / ``_load_scheduler_state`` keep the LR scheduler);
    optionally ``_release`` (called by ``shutdown``).
"""

from __future__ import annotations

import contextlib
import math
from typing import Any, Callable

import torch

from rl_core.backends import WorkerContext
from rl_core.batch import Batch
from rl_core.cards import ROLES
from rl_core.micro_batches import token_budget_groups
from rl_core.modeling import check_model_path, load_causal_lm, load_value_model, position_ids_from_mask, torch_dtype
from rl_core.train_engine.batch_sizes import TrainSizeError, inference_micro, role_config, split_sizes
from rl_core.train_engine.lr_schedule import LRSchedule
from rl_core.trainer.guard import first_non_finite_parameter, non_finite_error


def check_role(role: str, backend: str) -> None:
    """Raise :class:`TrainSizeError` for a role no train engine provides."""
    if role not in ROLES:
        raise TrainSizeError(f"unknown role {role!r}: the {backend} train backend provides {', '.join(sorted(ROLES))}")


class TrainEngineBase:
    """One role (actor, critic or ref) of a train backend in one worker process; see the module docstring."""

    backend = "train"

    def __init__(self, role: str, config, context: WorkerContext) -> None:
        check_role(role, self.backend)
        self.role = role
        self.config = config
        self.context = context
        self.device = context.torch_device
        self.trainable = role != "ref"
        self.compute_dtype = torch_dtype(config.model.dtype)
        self.autocast_dtype: torch.dtype | None = None
        self.optimizer: torch.optim.Optimizer | None = None
        self._schedule: LRSchedule | None = None
        self._scheduler = None

    # ------------------------------------------------------ for subclasses
    def _all_reduce(self, value: torch.Tensor, op: str) -> torch.Tensor:
        """A reduced copy of ``value`` over every rank of the job (``sum``, ``max``, ``min`` or ``avg``); called only when ``sharded``."""
        raise NotImplementedError(f"{type(self).__name__} must implement _all_reduce")

    def _forward_response(self, x: dict[str, torch.Tensor], temperature: float, with_entropy: bool, *, entropy_grad: bool = True):
        """``(log_probs [b, R], entropy [b, R] or None)`` of the response tokens of the micro-batch ``x`` (:meth:`_inputs`)."""
        raise NotImplementedError(f"{type(self).__name__} must implement _forward_response")

    def _values(self, x: dict[str, torch.Tensor]) -> torch.Tensor:
        """Critic values ``[b, R]`` of the micro-batch ``x`` (:meth:`_inputs`)."""
        raise NotImplementedError(f"{type(self).__name__} must implement _values")

    def _mini_batch_step(self, mini: Batch, micro: int, cfg, temperature: float) -> tuple[float, float, dict[str, float]]:
        """One optimizer step on a mini-batch: ``(global loss, gradient norm before clipping, averaged loss metrics)``."""
        raise NotImplementedError(f"{type(self).__name__} must implement _mini_batch_step")

    def _release(self) -> None:
        """Free what the backend holds besides the model and optimizer (process groups, ...); called by :meth:`shutdown`."""

    # ---------------------------------------------------------------- set-up
    def _load_hf_model(self, dtype: torch.dtype) -> tuple[torch.nn.Module, str]:
        """``(the role's HF model on the CPU, the config key of its path)``.

        Actor / ref: ``AutoModelForCausalLM`` from ``model.path``; critic: the
        backbone plus a scalar value head (:func:`rl_core.modeling.load_value_model`)
        from ``critic.model_path`` (default: the actor's).
        """
        config, mcfg = self.config, self.config.model
        if self.role == "critic":
            path, key = (config.critic.model_path or mcfg.path), ("critic.model_path" if config.critic.model_path else "model.path")
        else:
            path, key = mcfg.path, "model.path"
        check_model_path(path, key=key)  # random_init too: the config must be there
        loader = load_value_model if self.role == "critic" else load_causal_lm
        model = loader(
            path,
            dtype=dtype,
            device="cpu",
            random_init=mcfg.random_init,
            override_config=mcfg.override_config,
            trust_remote_code=mcfg.trust_remote_code,
            seed=config.trainer.seed,
            key=key,
        )
        return model, key

    def _init_optimizer(self, **adamw: Any) -> None:
        """``torch.optim.AdamW`` over the model's trainable parameters with the role's ``optim`` settings, and its LR schedule.

        ``adamw``: further AdamW keyword arguments (``fused=True``, ...).
        """
        ocfg = self._role_cfg().optim
        self.optimizer = torch.optim.AdamW(
            [p for p in self.model.parameters() if p.requires_grad],
            lr=ocfg.lr,
            betas=tuple(ocfg.betas),
            eps=ocfg.eps,
            weight_decay=ocfg.weight_decay,
            **adamw,
        )
        self._schedule = LRSchedule(ocfg, self.config.trainer.total_training_steps, section=f"{self.role}.optim")

    # ---------------------------------------------------------------- config
    def _role_cfg(self):
        return role_config(self.config, self.role)

    def _autocast(self):
        if self.autocast_dtype is not None:
            return torch.autocast(device_type=self.device.type, dtype=self.autocast_dtype)
        return contextlib.nullcontext()

    # ------------------------------------------------------------- inputs
    def _inputs(self, batch: Batch, rows: slice | torch.Tensor, extra: tuple[str, ...] = ()) -> dict[str, torch.Tensor]:
        """The micro-batch ``rows`` of ``batch`` on the device: ids, masks, positions, responses and the ``extra`` fields."""
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
        """Micro-batch slices; every rank runs the same number of forwards (the backend's collectives must match).

        A rank with fewer rows repeats its last slice; the extra results are dropped.
        """
        mine = math.ceil(rows / micro)
        count = int(self._all_reduce(torch.tensor(mine, device=self.device), "max").item()) if self.sharded else mine
        slices = [slice(s, min(s + micro, rows)) for s in range(0, rows, micro)]
        return slices + [slices[-1]] * (count - mine)

    def _token_budget_parts(self, batch: Batch) -> list[tuple[torch.Tensor, bool]] | None:
        """``(rows, real)`` per micro-batch formed by a token budget, or None when ``actor.use_dynamic_bsz`` is off.

        Actor and ref: consecutive rows fill ``actor.ppo_max_token_len_per_gpu``
        tokens (rl_core.micro_batches); ranks then may differ in their count, so a rank with fewer repeats its
        last micro-batch with ``real=False`` (dropped, or weight 0 in an update: the collectives still match).
        """
        a = self.config.actor
        if self.role == "critic" or not a.use_dynamic_bsz:
            return None
        groups = token_budget_groups(batch.tensors["attention_mask"].sum(-1), a.ppo_max_token_len_per_gpu)
        count = int(self._all_reduce(torch.tensor(len(groups), device=self.device), "max").item()) if self.sharded else len(groups)
        return [(torch.tensor(groups[min(i, len(groups) - 1)]), i < len(groups)) for i in range(count)]

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
        micro = inference_micro(self.config, self.role)
        n_real = math.ceil(rows / micro)
        parts = self._token_budget_parts(batch) or [(sl, i < n_real) for i, sl in enumerate(self._micro_slices(rows, micro))]
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

    @torch.no_grad()
    def compute_values(self, batch: Batch) -> torch.Tensor:
        """Critic values ``[b, R]`` (float32, CPU), in micro-batches of ``critic.ppo_micro_batch_size_per_gpu``."""
        if self.role != "critic":
            raise RuntimeError(f"compute_values is for the critic role, not {self.role!r}")
        self.model.eval()
        rows = len(batch)
        if rows == 0:
            raise ValueError("compute_values got an empty batch")
        micro = inference_micro(self.config, self.role)
        n_real = math.ceil(rows / micro)
        out = []
        for i, sl in enumerate(self._micro_slices(rows, micro)):
            x = self._inputs(batch, sl)
            with self._autocast():
                v = self._values(x)
            if i < n_real:
                out.append(v.float().cpu())
        return torch.cat(out)

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
            lo = int(self._all_reduce(torch.tensor(rows, device=self.device), "min").item())
            hi = int(self._all_reduce(torch.tensor(rows, device=self.device), "max").item())
            if lo != hi:
                raise TrainSizeError(f"{self.role} update: ranks got different numbers of sequences ({lo} to {hi}); the controller must split the step evenly")
        n_mini, mini_rows, micro, epochs = split_sizes(self.config, self.role, rows)
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

    # ------------------------------------------------- mini-batch step helpers
    def _loss_fields(self, mini: Batch, cfg) -> tuple[bool, tuple[str, ...], bool]:
        """``(on_policy, the batch fields the loss needs, whether the forward computes entropy)``.

        On-policy (one mini-batch, one epoch; checked in update): without 'old_log_probs' the
        old policy is the current one, so old = log_prob.detach() and the ratio is exactly 1.
        This saves the controller a forward pass; entropy then comes from this forward.
        """
        on_policy = self.role == "actor" and "old_log_probs" not in mini.tensors.keys()
        extra = ("values", "returns") if self.role == "critic" else (("advantages",) if on_policy else ("old_log_probs", "advantages"))
        if self.role == "actor" and cfg.use_kl_loss:
            extra = extra + ("ref_log_prob",)
        if self.role == "actor" and "rollout_is_weights" in mini.tensors.keys():
            extra = extra + ("rollout_is_weights",)  # rollout correction (algorithm.rollout_correction)
        want_entropy = self.role == "actor" and (cfg.entropy_coeff != 0 or on_policy)
        if "response_mask" not in mini.tensors.keys():
            raise KeyError(f"{self.role}.update needs 'response_mask' in the batch")
        return on_policy, extra, want_entropy

    def _actor_loss(self, x: dict[str, torch.Tensor], log_prob: torch.Tensor, entropy: torch.Tensor | None, cfg, on_policy: bool):
        """``(loss, metrics)`` of the actor on the micro-batch ``x`` (:func:`rl_core.algorithms.actor_loss.compute_actor_loss`)."""
        from rl_core.algorithms.actor_loss import compute_actor_loss

        return compute_actor_loss(
            log_prob=log_prob,
            old_log_prob=log_prob.detach() if on_policy else x["old_log_probs"],
            advantages=x["advantages"],
            response_mask=x["response_mask"],
            entropy=entropy,
            ref_log_prob=x.get("ref_log_prob"),
            rollout_is_weights=x.get("rollout_is_weights"),
            cfg=cfg,
        )

    def _critic_loss(self, x: dict[str, torch.Tensor], vpreds: torch.Tensor, cfg):
        """``(loss, metrics)`` of the critic on the micro-batch ``x`` (:func:`rl_core.algorithms.actor_loss.compute_critic_loss`)."""
        from rl_core.algorithms.actor_loss import compute_critic_loss

        return compute_critic_loss(vpreds=vpreds, values=x["values"], returns=x["returns"], response_mask=x["response_mask"], cfg=cfg)

    def _count(self, mask: torch.Tensor, mode: str) -> torch.Tensor:
        """The loss normaliser's count in ``mask``: tokens (``token-mean``) or sequences with a token (otherwise), float64."""
        m = mask.bool()
        if mode == "token-mean":
            return m.sum().to(torch.float64)
        return m.any(dim=-1).sum().to(torch.float64)

    def _micro_share(self, response_mask: torch.Tensor, mode: str, global_den: float) -> float:
        """A micro-batch loss's weight: its share of the global mini-batch's count ``global_den`` (1 for ``token-sum``)."""
        share = float(self._count(response_mask, mode)) / global_den if global_den > 0 else 0.0
        if mode == "token-sum":  # no normaliser: the micro-batch sums add up to the global sum
            share = 1.0
        return share

    def _mean_metrics(self, metric_sums: dict[str, torch.Tensor], n_micro: int, average: Callable[[torch.Tensor], torch.Tensor]) -> dict[str, float]:
        """The loss metrics summed over ``n_micro`` micro-batches, as means over them and (``average``, one collective) ranks."""
        names = sorted(metric_sums)
        if not names:
            return {}
        stacked = average(torch.stack([metric_sums[n] / n_micro for n in names]).to(self.device))
        return {n: float(v) for n, v in zip(names, stacked.tolist())}

    def _optimizer_step(self, loss_total: float, grad_norm: float) -> None:
        """The numerical guard (rl_core.trainer.guard), then the optimizer step and the weight check.

        ``loss_total`` and ``grad_norm`` must be global (the same on every
        rank), so every rank stops alike.
        """
        stage = f"update_{self.role}"
        for tensor, name, value in (("loss", "loss", loss_total), ("gradient norm", "grad_norm", grad_norm)):
            if not math.isfinite(value):
                self.optimizer.zero_grad(set_to_none=True)
                raise non_finite_error(stage=stage, role=self.role, rank=self.rank, tensor=tensor, detail=f"{name} = {value}")
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self._check_weights(stage)

    def _check_weights(self, stage: str) -> None:
        """After an optimizer step: stop (on every rank) if any weight became NaN / inf.

        The weights in memory are lost then; the run stops, and the last checkpoint (written
        before this step) is what a rerun resumes from.
        """
        bad = first_non_finite_parameter(self.model)
        flag = torch.tensor(0.0 if bad is None else 1.0, device=self.device)
        if self.sharded:
            flag = self._all_reduce(flag, "sum")
        if float(flag) == 0:
            return
        raise non_finite_error(
            stage=stage, role=self.role, rank=self.rank, tensor=f"weight {bad}" if bad else "weights (on another rank)",
            detail="after the optimizer step",
        )

    # ----------------------------------------------------------- checkpoint
    def _scheduler_state(self) -> dict[str, Any]:
        """The ``LambdaLR`` state without ``lr_lambdas`` (the schedule object, rebuilt from the config on load): plain data."""
        return {k: v for k, v in self.scheduler.state_dict().items() if k != "lr_lambdas"}

    def _load_scheduler_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`_scheduler_state`'s dict; a total given to this run (``set_total_steps``) wins over the saved one."""
        total = self._schedule.total_steps
        self.scheduler.load_state_dict({**state, "lr_lambdas": [None] * len(self.optimizer.param_groups)})
        if total:
            self._schedule.total_steps = total
        # the run's config wins over the checkpoint's hyper-parameters (a resume under a changed *.optim, accepted
        # with --resume-anyway, trains with the new values): the schedule's base lr and AdamW's betas, eps, weight decay
        ocfg = self._role_cfg().optim
        self._scheduler.base_lrs = [float(ocfg.lr)] * len(self.optimizer.param_groups)
        for group in self.optimizer.param_groups:
            group.update(initial_lr=float(ocfg.lr), betas=tuple(ocfg.betas), eps=ocfg.eps, weight_decay=ocfg.weight_decay)
            group["lr"] = float(ocfg.lr) * self._schedule(self._scheduler.last_epoch)
        self._scheduler._last_lr = [g["lr"] for g in self.optimizer.param_groups]

    def shutdown(self) -> None:
        self.optimizer = None
        self._scheduler = None
        self.model = None
        self._release()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
