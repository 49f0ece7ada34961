"""The loop's side of log-prob roles (:mod:`rl_core.plan.roles`, e.g. a distillation teacher): built once with the
run config and the policy's tokenizer; each step ``role.log_probs(batch, temperature)`` gives ``Tensor[B, T]``,
stored as ``batch["<name>_log_prob"]`` and handed to the estimator as ``log_probs[name]``.
"""

from __future__ import annotations

from typing import Any

import torch

from rl_core.batch import Batch
from rl_core.plan.roles import ACTOR
from rl_core.train_engine.guard import check_finite
from rl_core.trainer.metrics import timed


class LogProbRoles:
    """The run's log-prob roles, built from the Plan (``stack.log_prob_roles``)."""

    def __init__(self, stack: Any, tokenizer: Any) -> None:
        self.estimator_reads = tuple(getattr(stack.estimator, "log_probs", ()))
        self.roles = [(name, factory(stack.config, tokenizer)) for name, _card, factory in stack.log_prob_roles]

    def compute(self, batch: Batch, temperature: float, t: dict[str, float], metrics: dict[str, float]) -> None:
        """Each role's log-probs of the batch's responses into ``batch["<name>_log_prob"]`` (timed as ``timing_s/<name>``);
        with the actor's log-probs at hand, ``<name>/reverse_kl``: the sampled-token estimate of ``KL(actor || role)``
        (the mean over response tokens of ``log pi_actor - log pi_role``)."""
        mask = batch["response_mask"]
        for name, role in self.roles:
            with timed(t, name):
                lp = role.log_probs(batch, temperature)
            if not isinstance(lp, torch.Tensor) or lp.shape != mask.shape:
                got = list(lp.shape) if isinstance(lp, torch.Tensor) else type(lp).__name__
                raise ValueError(f"log-prob role {name!r} returned {got}; it must return a tensor of shape {list(mask.shape)} [batch, response length]")
            check_finite(lp, stage=name, role=name, tensor=f"{name} log-probs", mask=mask)
            batch[f"{name}_log_prob"] = lp.float()
            actor = _actor_key(batch)
            if actor is not None:
                m = mask.float()
                metrics[f"{name}/reverse_kl"] = float(((batch[actor].float() - lp.float()) * m).sum() / m.sum().clamp(min=1))

    def for_estimator(self, batch: Batch) -> dict[str, Any]:
        """``{"log_probs": {...}}`` for an estimator that declares ``log_probs``; ``{}`` for any other."""
        if not self.estimator_reads:
            return {}
        out = {}
        for name in self.estimator_reads:
            if name == ACTOR:
                key = _actor_key(batch)
                if key is None:
                    raise RuntimeError("the estimator reads the actor's log-probs, but the step has neither old nor rollout log-probs")
                out[ACTOR] = batch[key].float()
            else:
                out[name] = batch[f"{name}_log_prob"]
        return {"log_probs": out}


def _actor_key(batch: Batch) -> str | None:
    """The batch's log-probs of the policy that sampled: the old log-prob pass's, else the sampler's, else None."""
    keys = batch.tensors.keys()
    return next((k for k in ("old_log_probs", "rollout_log_probs") if k in keys), None)


def needs_actor_log_probs(stack: Any) -> bool:
    """Whether the estimator reads the sampling policy's log-probs (then a step without rollout log-probs runs the old
    log-prob pass)."""
    return ACTOR in tuple(getattr(stack.estimator, "log_probs", ()))
