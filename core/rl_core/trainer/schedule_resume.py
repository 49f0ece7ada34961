"""Resuming with another number of steps: a config change when it changes the learning-rate schedule.

A schedule that spans the total (cosine / linear ``lr_scheduler``, or ``lr_warmup_steps_ratio``) is recomputed over
the new total from the resumed step on, so the learning rate jumps. :func:`schedule_changes` names that as a config
difference line (the resumed step's rate under both totals), so the resume needs ``--resume-anyway``; then update
``k`` runs at ``lr * factor(k)`` over the new total (docs/checkpoints.md).
"""

from __future__ import annotations

from typing import Any, Mapping

import attrs

from rl_core.config.schema import OptimConfig
from rl_core.train_engine.lr_schedule import LRSchedule

TOTAL_KEYS = ("trainer.total_training_steps", "trainer.total_epochs")


def _get(cfg: Mapping[str, Any], dotted: str) -> Any:
    node: Any = cfg
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _optim(cfg: Mapping[str, Any], role: str) -> OptimConfig | None:
    raw = _get(cfg, f"{role}.optim")
    if not isinstance(raw, Mapping):
        return None
    names = {f.name for f in attrs.fields(OptimConfig)}
    try:
        return OptimConfig(**{k: v for k, v in raw.items() if k in names})
    except (TypeError, ValueError):
        return None


def spans_total(optim: OptimConfig) -> str | None:
    """Why ``optim``'s schedule depends on the total number of steps (None when it does not)."""
    why = []
    if optim.lr_scheduler != "constant":
        why.append(f"{optim.lr_scheduler} decay over the total")
    if not (optim.lr_warmup_steps and optim.lr_warmup_steps > 0) and optim.lr_warmup_steps_ratio > 0:
        why.append(f"warmup of lr_warmup_steps_ratio={optim.lr_warmup_steps_ratio} of the total")
    return " and ".join(why) or None


def _total(cfg: Mapping[str, Any]) -> int | None:
    steps = _get(cfg, "trainer.total_training_steps")
    return int(steps) if steps else None


def schedule_changes(old: Mapping[str, Any], new: Mapping[str, Any], resumed_step: int | None = None) -> list[str]:
    """``key: old -> new  (why)`` lines for a changed total that moves a role's lr schedule; [] when nothing moves."""
    changed = [k for k in TOTAL_KEYS if _get(old, k) != _get(new, k)]
    if not changed or (_total(old) is not None and _total(old) == _total(new)):
        return []  # the epochs changed under a fixed step count: the same total
    roles = ["actor"] + (["critic"] if _get(new, "critic.enable") else [])
    effects = []
    for role in roles:
        optim, before = _optim(new, role), _optim(old, role)
        why = spans_total(optim) if optim is not None else None
        if why is None or before is None:
            continue
        effect = f"{role}.optim's schedule ({why}) is recomputed over the new total"
        t_old, t_new = _total(old), _total(new)
        if resumed_step is not None and t_old and t_new:
            lr_old = float(before.lr) * LRSchedule(before, t_old, section=f"{role}.optim")(resumed_step)
            lr_new = float(optim.lr) * LRSchedule(optim, t_new, section=f"{role}.optim")(resumed_step)
            effect += f": step {resumed_step + 1}'s lr {lr_old:.3g} -> {lr_new:.3g}"
        effects.append(effect)
    if not effects:
        return []
    return [f"{k}: {_get(old, k)!r} -> {_get(new, k)!r}  ({'; '.join(effects)})" for k in changed]
