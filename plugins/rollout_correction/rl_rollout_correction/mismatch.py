"""The rollout-vs-trainer log-prob gap, measured every step (:func:`gap_metrics`), and the bound
``rollout.mismatch.max_abs_diff`` that stops a run (:func:`check_gap`; 0 by default in exact mode, rl-exact's).
docs/exact.md.
"""

from __future__ import annotations

from typing import Any

import torch

from rl_core.problems import UserError

GAP_FRAC = "rollout_corr/log_prob_gap_frac"


class MismatchError(UserError):
    """The rollout's log-probs and the trainer's are further apart than ``rollout.mismatch.max_abs_diff``."""


def gap_metrics(trainer: torch.Tensor, rollout: torch.Tensor, mask: torch.Tensor, threshold: float) -> dict[str, float]:
    """``rollout_corr/log_prob_gap_frac``: the share of valid tokens with ``|log pi_rollout - log pi_trainer| > threshold``."""
    m = mask.bool()
    if not m.any():
        return {}
    gap = (rollout.float() - trainer.float()).abs()
    return {GAP_FRAC: float((gap[m] > threshold).float().mean())}


def bound_of(config: Any) -> float | None:
    """``rollout.mismatch.max_abs_diff``; null: 0 in exact mode (an exact run must stay exact), else no bound."""
    bound = config.rollout.mismatch.max_abs_diff
    return (0.0 if config.rollout.exact else None) if bound is None else float(bound)


def check_gap(trainer: torch.Tensor, rollout: torch.Tensor, mask: torch.Tensor, *, bound: float | None, step: int, backend: str,
              batch: Any = None, tokenizer: Any = None, exact: bool = False) -> None:
    """Raise :class:`MismatchError` when a valid token's gap exceeds ``bound`` (None: never), naming the step, the
    backend and the largest-gap token (row, response position, id, text, both log-probs)."""
    if bound is None:
        return
    m = mask.bool()
    if not m.any():
        return
    gap = (rollout.float() - trainer.float()).abs().masked_fill(~m, -1.0)
    gap = torch.where(torch.isnan(gap) & m, torch.full_like(gap, float("inf")), gap)
    worst = float(gap.max())
    if worst <= bound:
        return
    row, col = divmod(int(gap.argmax()), gap.shape[1])
    token = ""
    if batch is not None and "responses" in batch.tensors.keys():
        tid = int(batch["responses"][row, col])
        text = tokenizer.decode([tid]) if tokenizer is not None else ""
        token = f", token id {tid} {text!r}"
    share = float((gap[m] > bound).float().mean())
    fix = ("rollout.exact=true should make it 0: a gap means the rollout's weights are not the trainer's (a staleness "
           "> 0, a weight-sync problem) or a kernel that differs between them; see docs/exact.md" if exact else
           "see docs/exact.md for the settings that reduce it (rollout.exact=true with the hf rollout; an fp32 LM head / "
           "batch-invariant mode of the engine), correct for it (algorithm.rollout_correction.rollout_is=token), or raise "
           "rollout.mismatch.max_abs_diff (null turns the bound off)")
    raise MismatchError(
        f"step {step}: the rollout ({backend}) and the trainer disagree on a sampled token's log-prob by {worst:.6g} > "
        f"rollout.mismatch.max_abs_diff={bound:g}: row {row}, response position {col}{token}, rollout log-prob "
        f"{float(rollout[row, col]):.8g}, trainer {float(trainer[row, col]):.8g} ({share:.2%} of the step's tokens beyond the bound). {fix}"
    )
