"""The mini-batch step every train backend shares, over :class:`~rl_core.train_engine.backend.TrainBackend` primitives:
loss weighting over the global mini-batch, zero-advantage rows left out, the numerical guard and float16 loss scaling
(docs/plugins.md, "A train backend", says how each works)."""

from __future__ import annotations

import contextlib
import math
from typing import Callable

import torch

from rl_core.algorithms.zero_advantage import can_skip_zero_advantage_rows, rows_with_signal
from rl_core.batch import Batch
from rl_core.modeling import position_ids_from_mask
from rl_core.train_engine.backend import TrainBackend
from rl_core.train_engine.guard import first_non_finite_parameter, non_finite_error
from rl_core.train_engine.micro_batches import micro_row_slices, token_budget_groups


def sampling_temperature(value) -> float:
    """The rollout temperature the log-probs are taken at (greedy or unset: 1)."""
    return 1.0 if value is None or value <= 0 else float(value)


def on_policy_problem(role: str, batch: Batch, on_policy: bool, mini_batches: int, epochs: int) -> str | None:
    """Why an update told ``on_policy`` cannot run, or None. On-policy (one mini-batch, one epoch) ``old = log_prob.detach()``
    and ``old_log_probs`` are not read; off-policy the actor needs them."""
    if role != "actor":
        return "only the actor's update can be on-policy" if on_policy else None
    if on_policy and (mini_batches > 1 or epochs > 1):
        return (
            f"the actor update was told it is on-policy, but it takes {mini_batches} mini-batches x {epochs} epochs: "
            "only one mini-batch and one epoch are; compute old log-probs first (actor.recompute_old_log_prob=true)"
        )
    if not on_policy and "old_log_probs" not in batch.tensors.keys():
        return (
            "the actor's batch has no 'old_log_probs': compute them first, or, for one mini-batch and one epoch, "
            "pass on_policy=True (the loop does when it skips that pass)"
        )
    return None


def autocast(b: TrainBackend):
    if b.autocast_dtype is not None:
        return torch.autocast(device_type=b.device.type, dtype=b.autocast_dtype)
    return contextlib.nullcontext()


def inputs(b: TrainBackend, batch: Batch, rows: slice | torch.Tensor, extra: tuple[str, ...] = ()) -> dict[str, torch.Tensor]:
    """The micro-batch ``rows`` of ``batch`` on the device: ids, masks, positions, responses and the ``extra`` fields
    (and ``multi_modal_inputs``, a list of per-row dicts of tensors, when the prompts carry images)."""
    t = batch.tensors
    for key in ("input_ids", "attention_mask", "responses"):
        if key not in t.keys():
            raise KeyError(f"{b.role}: the batch has no {key!r} (fields: {sorted(batch.keys())})")
    out = {"input_ids": t["input_ids"][rows], "attention_mask": t["attention_mask"][rows], "responses": t["responses"][rows]}
    out["position_ids"] = t["position_ids"][rows] if "position_ids" in t.keys() else position_ids_from_mask(out["attention_mask"])
    if "response_mask" in t.keys():
        out["response_mask"] = t["response_mask"][rows]
    else:
        out["response_mask"] = out["attention_mask"][:, -out["responses"].shape[1] :]
    if "routed_experts" in t.keys():  # MoE routing replay (rl-routing-replay): the experts to route each token to
        out["routed_experts"] = t["routed_experts"][rows]
    for key in extra:
        if key not in t.keys():
            raise KeyError(f"{b.role}.update needs {key!r} in the batch (fields: {sorted(batch.keys())})")
        out[key] = t[key][rows]
    out = {k: v.to(b.device, non_blocking=True) for k, v in out.items()}
    if "multi_modal_inputs" in batch.non_tensors:  # image inputs: each row's dict of the processor's tensors (rl-multimodal)
        mm = batch.non_tensors["multi_modal_inputs"][rows.cpu().numpy() if isinstance(rows, torch.Tensor) else rows]
        out["multi_modal_inputs"] = [{k: v.to(b.device, non_blocking=True) for k, v in d.items()} for d in mm]
    return out


def micro_slices(b: TrainBackend, rows: int, micro: int) -> list[slice]:
    """Micro-batch slices; every rank runs the same number of forwards (a rank with fewer repeats its last slice)."""
    mine = math.ceil(rows / micro)
    count = int(b.all_reduce(torch.tensor(mine, device=b.device), "max", "world").item()) if b.sharded else mine
    return (slices := micro_row_slices(rows, micro, b.config.model.compile is True)) + [slices[-1]] * (count - mine)


def token_budget_parts(b: TrainBackend, batch: Batch) -> list[tuple[torch.Tensor, bool]] | None:
    """``(rows, real)`` per micro-batch of ``actor.ppo_max_token_len_per_gpu`` tokens (``CP x`` that with context
    parallelism), or None without ``use_dynamic_bsz``. A sharded rank with fewer parts repeats its last with ``real=False``."""
    a = b.config.actor
    if b.role == "critic" or not a.use_dynamic_bsz:
        return None
    cp = int(getattr(b.config.train, "context_parallel_size", 1) or 1)
    groups = token_budget_groups(batch.tensors["attention_mask"].sum(-1), a.ppo_max_token_len_per_gpu * cp)
    count = int(b.all_reduce(torch.tensor(len(groups), device=b.device), "max", "world").item()) if b.sharded else len(groups)
    return [(torch.tensor(groups[min(i, len(groups) - 1)]), i < len(groups)) for i in range(count)]


def loss_fields(role: str, mini: Batch, cfg, on_policy_: bool) -> tuple[tuple[str, ...], bool]:
    """``(the batch fields the loss needs, whether the forward computes entropy)``."""
    extra = ("values", "returns") if role == "critic" else (("advantages",) if on_policy_ else ("old_log_probs", "advantages"))
    if role == "actor" and cfg.use_kl_loss:
        extra = extra + ("ref_log_prob",)
    if role == "actor" and "rollout_is_weights" in mini.tensors.keys():
        extra = extra + ("rollout_is_weights",)  # rollout correction (rl-rollout-correction's, from the loop)
    if "response_mask" not in mini.tensors.keys():
        raise KeyError(f"{role}.update needs 'response_mask' in the batch")
    return extra, role == "actor" and (cfg.entropy_coeff != 0 or on_policy_)


def count(mask: torch.Tensor, mode: str) -> torch.Tensor:
    """The loss normaliser's count in ``mask``: tokens (``token-mean``) or sequences with a token (otherwise), float64."""
    m = mask.bool()
    if mode == "token-mean":
        return m.sum().to(torch.float64)
    return m.any(dim=-1).sum().to(torch.float64)


def micro_share(response_mask: torch.Tensor, mode: str, global_den: float) -> float:
    """A micro-batch loss's weight: its share of the global mini-batch's count ``global_den`` (1 for ``token-sum``)."""
    share = float(count(response_mask, mode)) / global_den if global_den > 0 else 0.0
    if mode == "token-sum":  # no normaliser: the micro-batch sums add up to the global sum
        share = 1.0
    return share


def role_loss(role: str, x: dict[str, torch.Tensor], heads, cfg, on_policy_: bool, policy_loss: Callable | None, correction=None):
    """``(loss, metrics)`` of the role on ``x``; ``correction``: ``(rl-rollout-correction's object, its config)`` whose
    weights come from this forward's (pi_old's) log-probs."""
    from rl_core.algorithms.actor_loss import compute_actor_loss, compute_critic_loss

    if role == "critic":
        return compute_critic_loss(vpreds=heads.values, values=x["values"], returns=x["returns"], response_mask=x["response_mask"], cfg=cfg)
    weights = x.get("rollout_is_weights")
    if correction is not None:
        width = heads.log_probs.shape[-1]
        weights = correction[0].row_weights(heads.log_probs, x["rollout_log_probs"][:, :width], x["response_mask"][:, :width], correction[1])
    return compute_actor_loss(
        log_prob=heads.log_probs,
        old_log_prob=heads.log_probs.detach() if on_policy_ else x["old_log_probs"],
        advantages=x["advantages"],
        response_mask=x["response_mask"],
        entropy=heads.entropy,
        ref_log_prob=x.get("ref_log_prob"),
        rollout_is_weights=weights,
        cfg=cfg,
        policy_loss=policy_loss,
    )


class KeptLogProbs:
    """An on-policy update's own forward log-probs per row (the old policy's: every forward runs before the only optimizer
    step), kept instead of a separate pass; rows left out (zero advantage) stay not ``computed``."""

    def __init__(self, rows: int, width: int) -> None:
        self.parts: list[tuple[torch.Tensor, torch.Tensor]] = []  # on the device: a host copy per micro-batch would wait for its backward
        self.shape, self.host = (rows, width), None

    def add(self, ids: torch.Tensor, log_probs: torch.Tensor) -> None:
        self.parts.append((ids, log_probs.detach().float()))

    def to_host(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(values [rows, width], computed [rows])`` on the host, once the update's gradients are reduced."""
        values, computed = torch.zeros(self.shape, dtype=torch.float32), torch.zeros(self.shape[0], dtype=torch.bool)
        for ids, log_probs in self.parts:
            rows = ids.cpu()
            values[rows, : log_probs.shape[-1]], computed[rows] = log_probs.cpu(), True
        return values, computed


def update_correction(b: TrainBackend, on_policy_: bool):
    """``(rl-rollout-correction's object, algorithm.rollout_correction)`` when this on-policy update weights its loss
    itself from its own forward (the Plan's feature, ``WorkerContext.features``), else None."""
    features = b.context.features
    obj = features.get("rollout_correction") if features is not None else None
    rc = obj.update_correction(b.role, b.config, on_policy_) if obj is not None else None
    return (obj, rc) if rc is not None else None


def mini_batch_step(b: TrainBackend, mini: Batch, micro: int, cfg, temperature: float, on_policy_: bool, policy_loss,
                    kept: KeptLogProbs | None = None, row_ids: torch.Tensor | None = None) -> tuple[float, float, dict[str, float]]:
    """One optimizer step on a mini-batch: ``(global loss, gradient norm before clipping, averaged loss metrics)``; the
    forwards' log-probs go to ``kept`` at ``row_ids`` (default ``0..len(mini)``)."""
    mode = cfg.loss_agg_mode
    extra, want_entropy = loss_fields(b.role, mini, cfg, on_policy_)
    correction = update_correction(b, on_policy_)
    extra = extra + ("rollout_log_probs",) if correction is not None else extra
    mask_all = mini.tensors["response_mask"]
    global_den = float(b.all_reduce(count(mask_all, mode).to(b.device), "sum"))
    row_ids = torch.arange(len(mini)) if row_ids is None else row_ids
    if b.role == "actor" and b.uneven_micro_batches and can_skip_zero_advantage_rows(cfg):
        keep = rows_with_signal(mini.tensors["advantages"], mask_all)  # after the normaliser is fixed
        if len(keep) < len(mini):
            mini = mini.index(keep) if len(keep) else None
            row_ids = row_ids[keep]
    entropy_grad = b.role == "actor" and cfg.entropy_coeff != 0
    scaler = b.loss_scaler
    scale = scaler.scale if scaler is not None else 1.0
    b.zero_grad()
    loss_sum = torch.zeros((), dtype=torch.float64, device=b.device)
    metric_sums: dict[str, torch.Tensor] = {}
    n_micro = 0
    parts = [] if mini is None else token_budget_parts(b, mini) or [(s, True) for s in micro_row_slices(len(mini), micro, b.config.model.compile is True)]

    def loss_of(x, rows, real, heads):
        """The micro-batch's ``(loss or None, weight)``; its metrics and kept log-probs recorded (on the heads' ranks)."""
        nonlocal loss_sum, n_micro
        loss, metrics = role_loss(b.role, x, heads, cfg, on_policy_, policy_loss, correction) if heads is not None else (None, {})
        share = micro_share(x["response_mask"], mode, global_den) if real else 0.0  # not real: a repeat for the collectives
        if real and loss is not None:
            if kept is not None:
                kept.add(row_ids[rows], heads.log_probs)
            loss_sum += loss.detach().to(torch.float64) * share
            for name, value in metrics.items():
                metric_sums[name] = metric_sums.get(name, 0.0) + value.detach().to(torch.float64)
            n_micro += 1
        return loss, share * scale  # scale: float16's loss scale (1 otherwise)

    items = ((inputs(b, mini, rows, extra), rows, real) for rows, real in parts)
    heads_kw = {"temperature": temperature, "with_entropy": want_entropy, "entropy_grad": entropy_grad}
    if parts and b.runs_micro_batches():  # the backend's own schedule (e.g. megatron-core's pipeline)
        b.run_micro_batches(items, loss_of, **heads_kw)  # (each micro-batch: its forward, loss_of on the heads' ranks, backward)
    else:
        for x, rows, real in items:
            with autocast(b):
                heads = b.forward(x, training=True, **heads_kw)
                loss, weight = loss_of(x, rows, real, heads)
            b.backward(loss, weight)
    if not parts:  # every row skipped: a zero gradient, so AdamW still steps (momentum) as it would have
        for p in b.model.parameters():
            if p.requires_grad:
                p.grad = torch.zeros_like(p)
    grad_norm = b.reduce_and_clip(cfg.optim.grad_clip * scale if cfg.optim.grad_clip else cfg.optim.grad_clip) / scale
    loss_total = float(b.all_reduce(loss_sum, "sum"))
    metrics_out = mean_metrics(b, metric_sums, n_micro)
    if kept is None:
        loss_total, metrics_out = b.from_heads_stage((loss_total, metrics_out))
    else:  # one object, so a pipelined backend broadcasts once
        loss_total, metrics_out, kept.host = b.from_heads_stage((loss_total, metrics_out, kept.to_host()))
    metrics_out.update(b.step_metrics())  # the backend's own (e.g. MoE router losses), the same on every rank
    if scaler is not None and not scaled_step_taken(b, scaler, loss_total, grad_norm, scale):
        return loss_total, float("nan"), metrics_out  # skipped: no gradient norm to report
    optimizer_step(b, loss_total, grad_norm)
    return loss_total, grad_norm, metrics_out


def scaled_step_taken(b: TrainBackend, scaler, loss_total: float, grad_norm: float, scale: float) -> bool:
    """float16: whether the step goes ahead. A non-finite gradient norm above the scale's floor skips it and lowers the
    scale; otherwise the gradients are unscaled (a non-finite loss or gradient at the floor then stops the run in the guard)."""
    if math.isfinite(loss_total) and not math.isfinite(grad_norm) and not scaler.at_floor():
        scaler.update(grad_norm)
        b.zero_grad()
        return False
    if math.isfinite(grad_norm):
        scaler.update(grad_norm)
        b.unscale_grads(1.0 / scale)
    return True


def mean_metrics(b: TrainBackend, metric_sums: dict[str, torch.Tensor], n_micro: int) -> dict[str, float]:
    """The loss metrics summed over ``n_micro`` micro-batches, as means over them and (one collective) ranks."""
    names = sorted(metric_sums)
    if not names:
        return {}
    stacked = b.all_reduce(torch.stack([metric_sums[n] / n_micro for n in names]).to(b.device), "avg")
    return {n: float(v) for n, v in zip(names, stacked.tolist())}


def optimizer_step(b: TrainBackend, loss_total: float, grad_norm: float) -> None:
    """The numerical guard, then the step and the weight check (``loss_total`` and ``grad_norm`` are global)."""
    stage = f"update_{b.role}"
    for tensor, name, value in (("loss", "loss", loss_total), ("gradient norm", "grad_norm", grad_norm)):
        if not math.isfinite(value):
            b.zero_grad()
            raise non_finite_error(stage=stage, role=b.role, rank=b.rank, tensor=tensor, detail=f"{name} = {value}")
    b.step()
    bad = first_non_finite_parameter(b.model)
    flag = torch.tensor(0.0 if bad is None else 1.0, device=b.device)
    if b.sharded or b.world_size > 1:
        flag = b.all_reduce(flag, "sum", "world")
    if float(flag) == 0:
        return
    raise non_finite_error(stage=stage, role=b.role, rank=b.rank, tensor=f"weight {bad}" if bad else "weights (on another rank)", detail="after the optimizer step")
