"""Micro-batches formed by a token budget (verl's ``use_dynamic_bsz``): consecutive rows while their real tokens fit, so
short sequences travel in larger micro-batches. Rows stay in order (groups stay together for the shared-prompt forward)."""

from __future__ import annotations

import torch

from rl_core.problems import UserError


class TokenBudgetError(UserError, ValueError):
    """One sequence longer than the token budget."""


def token_budget_groups(lengths: torch.Tensor | list[int], budget: int, *, key: str = "actor.ppo_max_token_len_per_gpu") -> list[list[int]]:
    """Row indices per micro-batch: consecutive rows whose ``lengths`` sum to at most ``budget``."""
    if budget < 1:
        raise TokenBudgetError(f"{key}={budget}: the token budget must be at least 1")
    lengths = [int(x) for x in (lengths.tolist() if isinstance(lengths, torch.Tensor) else lengths)]
    longest = max(lengths, default=0)
    if longest > budget:
        raise TokenBudgetError(
            f"{key}={budget} is smaller than one sequence of this batch ({longest} tokens, prompt + response); "
            f"set it to at least data.max_prompt_length + data.max_response_length"
        )
    groups: list[list[int]] = []
    used = budget + 1
    for i, n in enumerate(lengths):
        if used + n > budget:
            groups.append([])
            used = 0
        groups[-1].append(i)
        used += n
    return groups


def micro_row_slices(rows: int, micro: int, compiled: bool = False) -> list[slice]:
    """Fixed micro-batches of ``micro`` rows over ``rows``. ``compiled``: a last micro-batch of one row takes one from the one
    before, since dynamo specialises a size-1 dim and would recompile the decoder layers; eager runs keep the plain split."""
    bounds = list(range(0, rows, micro)) + [rows]
    if compiled and micro > 2 and len(bounds) > 2 and bounds[-1] - bounds[-2] == 1:
        bounds[-2] -= 1
    return [slice(a, b) for a, b in zip(bounds, bounds[1:])]
