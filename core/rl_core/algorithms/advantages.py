"""Advantage estimators: one keyword-only signature for all of them.

Every estimator is called as::

    advantages, returns = fn(
        token_level_rewards=...,   # Tensor[B, T] float (reward on the last valid token, KL penalty per token, ...)
        response_mask=...,         # Tensor[B, T] bool/int/float; non-zero = a response token that counts
        index=None,                # Tensor[B] int64 group ids: the n samples of one prompt share an id
        values=None,               # Tensor[B, T] critic values (GAE)
        gamma=1.0, lam=1.0,        # discount, GAE lambda
        baseline_rewards=None,     # Tensor[B] reward of the greedy response (ReMax)
        options=None,              # Mapping of estimator-specific knobs
    )

and returns ``advantages`` and ``returns``, both ``Tensor[B, T]``. Inputs an
estimator does not use are ignored, so the loop calls every estimator (built-in
or third-party) the same way through :func:`compute_advantage`.

Conventions shared by all built-ins:

- **dtype**: inputs may be bf16/fp16/fp32; arithmetic is fp32 and the outputs
  are always **float32** (advantages are tiny tensors; bf16 would round them).
- **masks**: a masked position is treated as absent. Its reward and value are
  never read (NaN there is fine), and both outputs are exactly 0 there. For
  token-level recursions (GAE, reward-to-go) masked positions *inside* a
  response (e.g. tool output in a multi-turn rollout) are skipped: the next
  valid token's value / return is carried across the gap.
- **sequence score** of a response = sum of its valid token rewards.
- **groups** (``index``): as in verl, a group of size 1 is compared with a
  baseline of 0 (GRPO: mean 0, std 1), so its advantage is its raw score.
  Option ``zero_singleton_groups=True`` gives it 0 instead: one sample has no
  baseline, so its score says nothing about this response versus the
  prompt's others, and a raw score of e.g. 1 would weigh as much as a
  clearly better-than-average response. A group whose rewards are all equal
  gets exactly 0 (verl computes ``(r - mean) / (0 + eps)``, which turns the
  last-bit rounding of ``mean`` into advantages of order 1e-7/1e-6 = 0.1:
  a bug, so here it is 0 exactly).
- **returns** for the critic-free group estimators (GRPO, RLOO,
  REINFORCE++-baseline, OPO, GRPO pass@k, GPG) are the advantages, as in verl;
  option ``returns="reward_to_go"`` gives the undiscounted reward-to-go
  instead (the score on every token for an outcome reward), which is what a
  "return" means and makes ``returns_*`` metrics comparable across estimators.
  The critic never reads them, metrics do.
- **masked positions** are 0 in both outputs; verl leaves carried values at
  gaps and padding for some estimators (never read by a loss).
- Outputs carry no gradient (the body runs under ``torch.no_grad``).
"""

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
    """Map per-sample group keys (e.g. the batch's ``uid`` strings) to ``Tensor[B] int64`` ids.

    Ids are assigned in order of first appearance: ``["b", "a", "b"] -> [0, 1, 0]``.
    """
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
    """Per-row statistics of the row's group, each ``[B]`` float32.

    Keys: ``count``, ``sum``, ``mean``, ``std`` (unbiased; 0 for a group of
    one), ``constant`` (bool: every score in the group is equal).
    """
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
    """Discounted return ``G_t = r_t + gamma * G_{t'}`` with ``t'`` the next *valid* token.

    Shapes: ``rewards`` ``[B, T]`` (any float), ``mask`` ``[B, T]`` -> ``[B, T]``
    float32, 0 at masked positions. Masked rewards are ignored and masked
    positions do not count as time steps (gaps are skipped).
    """
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
    """Generalised Advantage Estimation (Schulman et al. 2015, "High-Dimensional
    Continuous Control Using Generalized Advantage Estimation"), as used by PPO.

    ``delta_t = r_t + gamma * V_{t+1} - V_t``; ``A_t = delta_t + gamma * lam * A_{t+1}``;
    ``returns_t = A_t + V_t`` (the critic's target). ``V`` after the last valid
    token is 0 (the response ended: terminal state).

    Shapes: rewards, mask, values ``[B, T]`` -> advantages, returns ``[B, T]`` float32.
    Uses ``values``, ``gamma``, ``lam``; ignores ``index`` and ``baseline_rewards``.

    Options: ``whiten`` (default True, as verl, which always whitens):
    normalise the advantages over all valid tokens of the batch (mean 0,
    std 1); ``returns`` are computed before. ``whiten=False`` keeps
    ``advantages == returns - values`` exactly (the paper's estimator).

    Departures: masked positions inside a response are skipped (``t+1`` is the
    next *valid* token), so their rewards and values are never read (verl
    does the same).
    """
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
    """Group-relative advantages (GRPO, Shao et al. 2024, "DeepSeekMath", outcome supervision).

    For response ``i`` of a group with scores ``r``: ``A_i = (r_i - mean(r)) / (std(r) + eps)``,
    broadcast over the response's valid tokens.

    Options: ``norm_adv_by_std`` (default True). False gives ``A_i = r_i - mean(r)``:
    Dr. GRPO (Liu et al. 2025, "Understanding R1-Zero-Like Training"), which
    drops the std division because it up-weights prompts that are nearly
    always (or never) solved; pair it with ``loss_agg_mode="seq-mean-token-sum-norm"``.
    ``epsilon`` (default 1e-6).

    Shapes: rewards, mask ``[B, T]``, index ``[B]`` -> ``[B, T]`` float32.
    Uses ``index``; ignores ``values``, ``gamma``, ``lam``, ``baseline_rewards``.

    ``std`` is the unbiased (n - 1) sample std. Groups of one, all-equal
    groups, ``zero_singleton_groups`` and ``returns``: module docstring.
    """
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
    """Run the estimator registered as ``name`` (built-in or third-party) with ``kwargs``.

    ``kwargs`` are the common estimator arguments (module docstring). Before
    calling, the card's declared needs are checked, so a missing input is a
    clear error for any estimator: ``needs_critic`` -> ``values``,
    ``needs_groups`` -> ``index``, ``needs_greedy_baseline`` ->
    ``baseline_rewards``. The loop passes the resolved ``card`` and its loaded
    function ``fn`` (:class:`rl_core.plan.resolver.Plan`); no registry is read here: without
    ``card``, ``name`` is one of core's built-in estimators (code without a plan passes a plugin's card itself).
    """
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
