"""Advantage estimators: one keyword-only signature for all of them (docs/algorithms.md has it and the conventions:
fp32 outputs, masked positions 0 and skipped, groups of one, all-equal groups exactly 0, ``returns``)."""

from __future__ import annotations

from typing import Any, Hashable, Iterable, Mapping

import torch
from torch import Tensor

from rl_core.problems import UserError
from rl_core.algorithms.masked import (
    bool_mask,
    check_same_shape,
    masked_whiten,
    zero_masked,
)
from rl_core.algorithms.builtin import builtin_card

GRPO_EPS = 1e-6  # added to the group std (DeepSeekMath / verl use the same order of magnitude)


# ---------------------------------------------------------------- helpers
def group_index(uids: Iterable[Hashable], device: torch.device | str | None = None) -> Tensor:
    """Per-sample group keys (the batch's ``uid`` s) -> ``Tensor[B] int64`` ids in order of first appearance."""
    ids: dict[Hashable, int] = {}
    out = [ids.setdefault(u, len(ids)) for u in uids]
    return torch.tensor(out, dtype=torch.int64, device=device)


def prepare_rewards(token_level_rewards: Tensor, response_mask: Tensor) -> tuple[Tensor, Tensor]:
    if token_level_rewards.dim() != 2:
        raise ValueError(f"token_level_rewards must be [B, T], got shape {tuple(token_level_rewards.shape)}")
    check_same_shape("token_level_rewards", token_level_rewards, response_mask)
    mask = bool_mask(response_mask)
    return zero_masked(token_level_rewards, mask).to(torch.float32), mask


def check_index(index: Tensor | None, batch: int, name: str, device: torch.device) -> Tensor:
    if index is None:
        raise ValueError(
            f"{name} needs `index` (Tensor[B] int64 group ids, the n samples of a prompt sharing one id); "
            "use rollout.n > 1 and pass rl_core.algorithms.advantages.group_index(batch['uid'])"
        )
    if not isinstance(index, Tensor):
        index = group_index(index)
    if index.dim() != 1 or index.shape[0] != batch:
        raise ValueError(f"index must be [B]=[{batch}], got shape {tuple(index.shape)}")
    if index.dtype.is_floating_point or index.dtype == torch.bool:
        raise ValueError(f"index must hold integer group ids, got dtype {index.dtype}")
    return index.to(device=device, dtype=torch.int64)


def check_values(values: Tensor | None, mask: Tensor, name: str) -> Tensor:
    if values is None:
        raise ValueError(f"{name} needs `values` (Tensor[B, T] from a critic); enable the critic")
    check_same_shape("values", values, mask)
    return zero_masked(values, mask).to(torch.float32)


def sequence_scores(rewards: Tensor) -> Tensor:
    """``[B, T]`` rewards (already zero at masked positions) -> ``[B]`` scores."""
    return rewards.sum(dim=-1)


def group_stats(scores: Tensor, index: Tensor) -> dict[str, Tensor]:
    """Per-row ``count``, ``sum``, ``mean``, ``std`` (unbiased; 0 for one) and ``constant`` (all equal) of its group, ``[B]``."""
    _, inv = torch.unique(index, return_inverse=True)
    n_groups = int(inv.max()) + 1 if inv.numel() else 0
    zeros = scores.new_zeros(n_groups)
    count = zeros.index_add(0, inv, torch.ones_like(scores))
    total = zeros.index_add(0, inv, scores)
    mean = total / count
    dev = scores - mean[inv]
    var = zeros.index_add(0, inv, dev * dev) / (count - 1).clamp_min(1)
    gmax = zeros.scatter_reduce(0, inv, scores, reduce="amax", include_self=False)
    gmin = zeros.scatter_reduce(0, inv, scores, reduce="amin", include_self=False)
    return {
        "count": count[inv],
        "sum": total[inv],
        "mean": mean[inv],
        "std": var.sqrt()[inv],
        "constant": (gmax == gmin)[inv],
    }


def reward_to_go(rewards: Tensor, mask: Tensor, gamma: float = 1.0) -> Tensor:
    """``G_t = r_t + gamma * G_{t'}``, ``t'`` the next valid token: ``[B, T]`` float32, 0 at masked positions, which do
    not count as time steps."""
    r, m = prepare_rewards(rewards, mask)
    if gamma == 1.0:  # no discount: a reversed cumulative sum (gaps hold zeros)
        out = r.flip(-1).cumsum(-1).flip(-1)
        return torch.where(m, out, torch.zeros_like(out))
    running = r.new_zeros(r.shape[0])
    out = torch.zeros_like(r)
    for t in reversed(range(r.shape[1])):
        step = r[:, t] + gamma * running
        running = torch.where(m[:, t], step, running)
        out[:, t] = torch.where(m[:, t], step, torch.zeros_like(step))
    return out


def broadcast_rows(per_seq: Tensor, mask: Tensor) -> Tensor:
    """``[B]`` -> ``[B, T]`` on valid tokens, exact 0 elsewhere."""
    out = per_seq.unsqueeze(-1).expand(mask.shape)
    return torch.where(mask, out, torch.zeros_like(out))


def option(options: Mapping[str, Any] | None, key: str, default: Any) -> Any:
    return default if options is None else options.get(key, default)


def no_signal(stats: dict[str, Tensor], options: Mapping[str, Any] | None) -> Tensor:
    """``[B]`` bool: rows whose advantage is 0 exactly (all-equal groups; groups of one if asked)."""
    constant = stats["constant"] & (stats["count"] >= 2)
    if option(options, "zero_singleton_groups", False):
        return constant | (stats["count"] < 2)
    return constant


def group_outputs(per_seq: Tensor, rewards: Tensor, mask: Tensor, options: Mapping[str, Any] | None) -> tuple[Tensor, Tensor]:
    """``[B]`` advantages -> (advantages, returns) ``[B, T]``; returns per the ``returns`` option."""
    adv = broadcast_rows(per_seq, mask)
    return adv, group_returns(adv, rewards, mask, options)


def group_returns(adv: Tensor, rewards: Tensor, mask: Tensor, options: Mapping[str, Any] | None) -> Tensor:
    kind = option(options, "returns", "advantages")
    if kind == "advantages":
        return adv.clone()
    if kind == "reward_to_go":
        return reward_to_go(rewards, mask)
    raise ValueError(f"algorithm.options.returns={kind!r} is not supported; use 'advantages' (verl) or 'reward_to_go'")


# ------------------------------------------------------------- estimators
@torch.no_grad()
def gae(
    *,
    token_level_rewards: Tensor,
    response_mask: Tensor,
    index: Tensor | None = None,
    values: Tensor | None = None,
    gamma: float = 1.0,
    lam: float = 1.0,
    baseline_rewards: Tensor | None = None,
    options: Mapping[str, Any] | None = None,
) -> tuple[Tensor, Tensor]:
    """Generalised Advantage Estimation (Schulman et al. 2015) from ``values``, ``gamma``, ``lam``; option ``whiten``
    (default True, as verl). ``returns = A + V`` are computed before whitening; docs/algorithms.md."""
    rewards, mask = prepare_rewards(token_level_rewards, response_mask)
    v = check_values(values, mask, "gae")
    batch, length = rewards.shape
    next_value = rewards.new_zeros(batch)
    last_adv = rewards.new_zeros(batch)
    adv = torch.zeros_like(rewards)
    for t in reversed(range(length)):
        m = mask[:, t]
        delta = rewards[:, t] + gamma * next_value - v[:, t]
        a_t = delta + gamma * lam * last_adv
        last_adv = torch.where(m, a_t, last_adv)
        next_value = torch.where(m, v[:, t], next_value)
        adv[:, t] = torch.where(m, a_t, torch.zeros_like(a_t))
    returns = torch.where(mask, adv + v, torch.zeros_like(adv))
    if option(options, "whiten", True):
        adv = masked_whiten(adv, mask)
    return adv, returns


@torch.no_grad()
def grpo(
    *,
    token_level_rewards: Tensor,
    response_mask: Tensor,
    index: Tensor | None = None,
    values: Tensor | None = None,
    gamma: float = 1.0,
    lam: float = 1.0,
    baseline_rewards: Tensor | None = None,
    options: Mapping[str, Any] | None = None,
) -> tuple[Tensor, Tensor]:
    """Group-relative advantages (GRPO, DeepSeekMath): ``(r_i - mean(r)) / (std(r) + epsilon)`` over ``index``'s groups,
    broadcast over valid tokens; ``norm_adv_by_std=False`` is Dr. GRPO (docs/algorithms.md)."""
    rewards, mask = prepare_rewards(token_level_rewards, response_mask)
    idx = check_index(index, rewards.shape[0], "grpo", rewards.device)
    scores = sequence_scores(rewards)
    stats = group_stats(scores, idx)
    single = stats["count"] < 2
    mean = torch.where(single, torch.zeros_like(scores), stats["mean"])
    std = torch.where(single, torch.ones_like(scores), stats["std"])
    centred = scores - mean
    if option(options, "norm_adv_by_std", True):
        centred = centred / (std + float(option(options, "epsilon", GRPO_EPS)))
    per_seq = torch.where(no_signal(stats, options), torch.zeros_like(centred), centred)
    return group_outputs(per_seq, rewards, mask, options)


# ------------------------------------------------------------ dispatch
def compute_advantage(name: str, *, card: Any = None, fn: Any = None, **kwargs: Any) -> tuple[Tensor, Tensor]:
    """Run the estimator ``name`` with the common ``kwargs``, its card's needs checked first (``needs_critic`` ->
    ``values``, ...). The loop passes the Plan's ``card`` and loaded ``fn``; without ``card``, ``name`` is a built-in."""
    if "registry" in kwargs:
        raise TypeError(f"compute_advantage({name!r}) takes the estimator's card (card=registry.get('estimator', {name!r})), not a registry")
    if card is None:
        card = builtin_card("estimator", name)
    needs = (
        ("needs_critic", "values", "a critic's values"),
        ("needs_groups", "index", "group ids (rollout.n > 1)"),
        ("needs_greedy_baseline", "baseline_rewards", "the greedy response's reward"),
    )
    for flag, arg, what in needs:
        if getattr(card, flag, False) and kwargs.get(arg) is None:
            raise ValueError(f"advantage estimator {name!r} ({card.provider or 'unregistered'}) needs `{arg}`: {what}")
    fn = fn if fn is not None else card.load()
    return check_estimator_output(name, card, fn(**kwargs), kwargs["token_level_rewards"].shape)


class EstimatorOutputError(UserError, TypeError):
    """An estimator returned something other than ``(advantages, returns)``, each ``Tensor[B, T]``."""


def check_estimator_output(name: str, card: Any, out: Any, shape: torch.Size) -> tuple[Tensor, Tensor]:
    """``out`` if it is two tensors of ``shape``; else a clear error naming the estimator and where it comes from."""
    who = f"advantage estimator {name!r} ({getattr(card, 'factory', '?')}, from {getattr(card, 'provider', None) or 'unregistered'})"
    expected = f"(advantages, returns), two tensors of shape {list(shape)} [batch, response length]"
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        got = "nothing (None)" if out is None else f"{type(out).__name__}" + (f" of {len(out)} items" if isinstance(out, (tuple, list)) else "")
        raise EstimatorOutputError(f"{who} returned {got}; it must return {expected}. Fix the estimator or pick another algorithm.adv_estimator")
    for what, t in zip(("advantages", "returns"), out):
        if not isinstance(t, Tensor):
            raise EstimatorOutputError(f"{who} returned {type(t).__name__} as its {what}; it must return {expected}")
        if t.shape != shape:
            raise EstimatorOutputError(f"{who} returned {what} of shape {list(t.shape)}; it must return {expected}")
    return out[0], out[1]
