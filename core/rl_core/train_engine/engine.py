"""One role of a train backend, driven by core: inference loops, the update, the LR schedule, checkpoints.

:class:`RoleEngine` follows :class:`rl_core.backends.TrainEngine` (what the worker calls) over a
:class:`~rl_core.train_engine.backend.TrainBackend` (what a plugin implements); the update itself is
:mod:`rl_core.train_engine.update`. Batch sizes and inference micro-batches: docs/plugins.md ("A train backend")."""

from __future__ import annotations

import contextlib
import math
from typing import Any, Callable, Iterable, Iterator

import torch

from rl_core.batch import Batch
from rl_core.train_engine import loss_scale, update as upd
from rl_core.train_engine.backend import TrainBackend
from rl_core.train_engine.batch_sizes import RoleSizes, TrainSizeError, inference_micro, role_config, role_sizes
from rl_core.train_engine.lr_schedule import LRSchedule
from rl_core.algorithms.actor_loss import get_policy_loss


def build_role_engine(factory: Callable[..., TrainBackend], role: str, config, context, *, sizes=None, policy_loss=None) -> "RoleEngine":
    """``RoleEngine(factory(role, config, context), ...)``: how the worker turns a train card's factory into an engine."""
    return RoleEngine(factory(role, config, context), sizes=sizes, policy_loss=policy_loss)


class RoleEngine:
    """One role of a train backend in one worker process. ``sizes``: the resolved :class:`rl_core.config.normalize.Sizes`
    (None: from the config); ``policy_loss``: the Plan's loaded loss (None: the built-in ``actor.policy_loss``)."""

    def __init__(self, backend: TrainBackend, *, sizes: Any = None, policy_loss: Callable | None = None) -> None:
        if not isinstance(backend, TrainBackend):
            raise TypeError(f"a train card's factory must return a rl_core.train_engine.backend.TrainBackend, got {type(backend).__name__}")
        self.backend = backend
        self.role = backend.role
        self.config = backend.config
        self.trainable = backend.trainable
        self.sizes: RoleSizes | None = role_sizes(self.config, self.role, sizes) if self.trainable and sizes is not None else None
        if self.role == "actor" and policy_loss is None:
            policy_loss = get_policy_loss(self.config.actor.policy_loss)
        self.policy_loss = policy_loss
        self._schedule: LRSchedule | None = None
        self._scheduler = None
        if self.trainable:
            ocfg = role_config(self.config, self.role).optim
            self._schedule = LRSchedule(ocfg, self.config.trainer.total_training_steps, section=f"{self.role}.optim")

    @property
    def model(self) -> torch.nn.Module:
        """The backend's model (for tests and benches)."""
        return self.backend.model

    @property
    def optimizer(self) -> torch.optim.Optimizer | None:
        return self.backend.optimizer

    # ------------------------------------------------------------- inference
    @torch.no_grad()
    def compute_log_prob(self, batch: Batch, *, temperature: float = 1.0, with_entropy: bool = False, reference: bool = False) -> dict[str, torch.Tensor]:
        """``{"log_probs", "entropy"}`` ``[b, R]`` (float32, CPU; ``temperature <= 0`` taken as 1), with ``routed_experts``
        when recorded. ``reference``: the reference policy from this actor model (:meth:`TrainBackend.reference_policy`)."""
        if self.role == "critic":
            raise RuntimeError("compute_log_prob is for the actor and ref roles; the critic has compute_values")
        with (self.backend.reference_policy() if reference else contextlib.nullcontext()):
            heads = self._infer(batch, temperature=upd.sampling_temperature(temperature), with_entropy=with_entropy, what="compute_log_prob")
        out = {"log_probs": torch.cat([h.log_probs.float().cpu() for h in heads])}
        if with_entropy:
            out["entropy"] = torch.cat([h.entropy.float().cpu() for h in heads])
        if heads and heads[0].routed_experts is not None:  # actor.router_replay=R2: the routing this pass recorded
            out["routed_experts"] = torch.cat([h.routed_experts.cpu() for h in heads])
        return out

    @torch.no_grad()
    def compute_values(self, batch: Batch) -> torch.Tensor:
        """Critic values ``[b, R]`` (float32, CPU), in micro-batches."""
        if self.role != "critic":
            raise RuntimeError(f"compute_values is for the critic role, not {self.role!r}")
        return torch.cat([h.values.float().cpu() for h in self._infer(batch, temperature=1.0, with_entropy=False, what="compute_values")])

    def _infer(self, batch: Batch, *, temperature: float, with_entropy: bool, what: str) -> list:
        b = self.backend
        b.model.eval()
        rows = len(batch)
        if rows == 0:
            raise ValueError(f"{what} got an empty batch")
        micro = inference_micro(self.config, self.role)
        n_real = math.ceil(rows / micro)
        parts = upd.token_budget_parts(b, batch) or [(sl, i < n_real) for i, sl in enumerate(upd.micro_slices(b, rows, micro))]
        out = []
        with b.on_device("infer"):
            for sl, real in parts:
                x = upd.inputs(b, batch, sl)
                with upd.autocast(b):
                    heads = b.forward(x, temperature=temperature, with_entropy=with_entropy, entropy_grad=True, training=False)
                if real:
                    out.append(heads)
        return out

    # ---------------------------------------------------------------- update
    @property
    def scheduler(self):
        if self._scheduler is None and self.backend.optimizer is not None:
            self._scheduler = torch.optim.lr_scheduler.LambdaLR(self.backend.optimizer, self._schedule)
        return self._scheduler

    def set_total_steps(self, total: int) -> None:
        """The number of ``update()`` calls the run will make (for warmup ratios and decay)."""
        if total is None or int(total) <= 0:
            raise ValueError(f"set_total_steps needs a positive number of steps, got {total!r}")
        if self._schedule is None:
            return
        self._schedule.total_steps = int(total)
        if self._scheduler is not None:  # re-evaluate the current lr under the new total
            for group, base in zip(self.backend.optimizer.param_groups, self._scheduler.base_lrs):
                group["lr"] = base * self._schedule(self._scheduler.last_epoch)

    def update(self, batch: Batch, *, on_policy: bool = False, keep_log_probs: bool = False) -> dict[str, Any]:
        """One PPO update of this role over this rank's shard of the step: ``loss``, ``grad_norm`` (before clipping), ``lr``
        and the loss functions' metrics, averaged. ``on_policy`` / ``keep_log_probs``: docs/plugins.md ("On-policy updates")."""
        if not self.trainable:
            raise RuntimeError("the ref role does not train; update() is for the actor and critic")
        b = self.backend
        rows = len(batch)
        if b.sharded:  # every rank must agree, or the collectives below would hang
            lo = int(b.all_reduce(torch.tensor(rows, device=b.device), "min", "world").item())
            hi = int(b.all_reduce(torch.tensor(rows, device=b.device), "max", "world").item())
            if lo != hi:
                raise TrainSizeError(f"{self.role} update: ranks got different numbers of sequences ({lo} to {hi}); the controller must split the step evenly")
        sizes = self.sizes or role_sizes(self.config, self.role)
        if (problem := upd.on_policy_problem(self.role, batch, on_policy, sizes.mini_batches, sizes.epochs)) is not None:
            raise TrainSizeError(f"{self.role} update: {problem}")
        if keep_log_probs and not on_policy:
            raise TrainSizeError(f"{self.role} update: keep_log_probs=True needs on_policy=True (only then are the update's log-probs the old policy's)")
        cfg = role_config(self.config, self.role)
        temperature = upd.sampling_temperature(batch.meta.get("temperature", self.config.rollout.temperature))
        self.scheduler  # noqa: B018 - built before the lr is read (LambdaLR sets the first value)
        lr = b.optimizer.param_groups[0]["lr"]
        with b.on_device("update"):
            kept = upd.KeptLogProbs(rows, batch.tensors["responses"].shape[1]) if keep_log_probs else None
            out = self._update(batch, b, rows, sizes, cfg, temperature, on_policy, kept)
        out["lr"] = lr
        if kept is not None:
            out.update(zip(("log_probs", "log_probs_computed"), kept.host or kept.to_host()))
        return out

    def _update(self, batch, b: TrainBackend, rows, sizes, cfg, temperature, on_policy, kept=None) -> dict[str, float]:
        scheduler = self.scheduler
        mini_rows = sizes.mini_rows(rows)
        b.model.train()
        sums: dict[str, float] = {}
        counts: dict[str, int] = {}
        losses, norms = [], []
        for epoch in range(sizes.epochs):
            if getattr(cfg, "shuffle", False):
                gen = torch.Generator().manual_seed(self.config.trainer.seed + 1000 * scheduler.last_epoch + epoch)
                order = torch.randperm(rows, generator=gen)
            else:
                order = torch.arange(rows)
            for k in range(sizes.mini_batches):
                ids = order[k * mini_rows : (k + 1) * mini_rows]
                mini = batch.index(ids)
                loss, norm, metrics = upd.mini_batch_step(b, mini, sizes.micro, cfg, temperature, on_policy, self.policy_loss, kept, ids)
                losses.append(loss)
                norms.append(norm)
                for name, value in metrics.items():
                    sums[name] = sums.get(name, 0.0) + value
                    counts[name] = counts.get(name, 0) + 1
        scheduler.step()
        b.model.eval()
        out = {name: sums[name] / counts[name] for name in sums}
        out.update(loss=sum(losses) / len(losses), grad_norm=(sum(norms) / len(norms)) if norms else float("nan"))
        loss_scale.add_metrics(out, b.loss_scaler, norms)  # float16: the scale, skipped steps (no norm)
        return out

    # ------------------------------------------------------ weights and state
    def named_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        return self.backend.named_weights()

    def lora_adapter(self, dtype: torch.dtype | None = None) -> tuple[dict[str, torch.Tensor], dict] | None:
        """``(tensors, peft_config)`` of the actor's LoRA adapters for a rollout engine's LoRA API, in ``dtype`` (the
        engine's ``adapter_dtype``; None: float32); None without LoRA."""
        return self.backend.lora_adapter(dtype)

    def named_base_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """The frozen base weights under LoRA (adapters not folded in), sent once to an engine that applies adapters."""
        return self.backend.named_base_weights()

    def sample_weights(self, positions: dict[str, torch.Tensor]) -> dict[str, torch.Tensor] | None:
        """The trained policy's weights at flat ``positions`` as the backend computes them apart from
        :meth:`named_weights` (rl_core.weight_sync_check.verify_sent); None when the backend has no such view."""
        return self.backend.sample_weights(positions)

    def save_hf(self, path: str) -> None:
        self.backend.save_hf(path)

    def save_checkpoint(self, path: str) -> None:
        """The backend's checkpoint of what ``trainer.save_contents`` names: without ``optimizer`` the backend sees no
        optimizer while it saves (model only), without ``extra`` no LR-schedule state is written."""
        contents = set(self.config.trainer.save_contents)
        scheduler = self._scheduler_state() if self.backend.optimizer is not None and "extra" in contents else None
        with self._optimizer_hidden("optimizer" not in contents):  # float16's loss scale rides with the schedule's state
            self.backend.save_checkpoint(path, loss_scale.with_state(scheduler, self.backend.loss_scaler))

    @contextlib.contextmanager
    def _optimizer_hidden(self, hide: bool):
        optimizer = self.backend.optimizer
        if hide:
            self.backend.optimizer = None
        try:
            yield
        finally:
            self.backend.optimizer = optimizer

    def load_checkpoint(self, path: str, contents: Iterable[str] | None = None, step: int = 0) -> None:
        """Restore a checkpoint's ``contents`` (None: all of it). Without ``optimizer`` AdamW starts from a fresh state;
        without ``extra`` (or a checkpoint without it) the LR schedule is put at ``step`` updates (one per trainer step)."""
        contents = {"model", "optimizer", "extra"} if contents is None else set(contents)
        with self._optimizer_hidden("optimizer" not in contents):
            state = self.backend.load_checkpoint(path)
        state = loss_scale.restore(state if "extra" in contents else None, self.backend.loss_scaler)
        optimizer = self.backend.optimizer
        if optimizer is None:
            return
        if state is None or "extra" not in contents:  # no schedule state: the schedule stands at `step` updates
            self.scheduler.last_epoch, self.scheduler._step_count = int(step), int(step) + 1
        else:
            total = self._schedule.total_steps  # a total given to this run (set_total_steps) wins over the saved one
            self.scheduler.load_state_dict({**state, "lr_lambdas": [None] * len(optimizer.param_groups)})
            if total:
                self._schedule.total_steps = total
        # the run's config wins over the checkpoint's hyper-parameters (a resume under a changed *.optim, accepted
        # with --resume-anyway, trains with the new values): the schedule's base lr and AdamW's betas, eps, weight decay
        ocfg = role_config(self.config, self.role).optim
        self._scheduler.base_lrs = [float(ocfg.lr)] * len(optimizer.param_groups)
        for group in optimizer.param_groups:
            group.update(initial_lr=float(ocfg.lr), betas=tuple(ocfg.betas), eps=ocfg.eps, weight_decay=ocfg.weight_decay)
            group["lr"] = float(ocfg.lr) * self._schedule(self._scheduler.last_epoch)
        self._scheduler._last_lr = [g["lr"] for g in optimizer.param_groups]

    def _scheduler_state(self) -> dict[str, Any]:
        """The ``LambdaLR`` state without ``lr_lambdas`` (the schedule object, rebuilt from the config on load): plain data."""
        return {k: v for k, v in self.scheduler.state_dict().items() if k != "lr_lambdas"}

    def local_state_dict(self) -> dict[str, Any] | None:
        """The backend's own model / optimizer state for tests (None when it has none), with the scheduler's."""
        out = self.backend.local_state_dict()
        if out is not None and self.backend.optimizer is not None:
            out["scheduler"] = self._scheduler_state()
        return out

    def shutdown(self) -> None:
        b = self.backend
        b.optimizer = None
        self._scheduler = None
        b.model = None
        b.release()
        if b.device.type == "cuda":
            torch.cuda.empty_cache()
