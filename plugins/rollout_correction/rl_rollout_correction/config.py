"""rl-rollout-correction's config sections (ConfigSectionCards: rl_core.config.sections), read and checked with core's
own: ``algorithm.rollout_correction`` (verl's keys) and ``rollout.mismatch`` (the gap's threshold and bound)."""

from __future__ import annotations

import attrs
from rl_core.config.schema import choice, num


@attrs.frozen(kw_only=True)
class MismatchConfig:
    """The rollout-vs-trainer log-prob gap, measured every step (``rollout_corr/*``; :mod:`rl_rollout_correction.mismatch`)."""

    # |log pi_rollout - log pi_trainer| beyond which a token counts in rollout_corr/log_prob_gap_frac
    threshold: float = num(0.1, ge=0, hint="a log-prob gap, e.g. 0.1")
    # the run stops (step, backend, the largest-gap token) when a token's gap exceeds it; null: 0 with rollout.exact, else never
    max_abs_diff: float | None = num(None, ge=0, hint="null: 0 with rollout.exact=true, else no bound")


@attrs.frozen(kw_only=True)
class RolloutCorrectionConfig:
    """verl's ``algorithm.rollout_correction``: importance weights / rejection computed from the
    rollout engine's log-probs against the old policy's (:mod:`rl_rollout_correction.correction`).
    Needs ``rollout.calculate_log_probs=true``; metrics are logged whenever both log-probs exist."""

    rollout_is: str | None = choice(None, ("token", "sequence"), hint="null: no weights")
    # str first: "5_0.5" must stay a string (Python's float() reads "_" as a digit separator)
    rollout_is_threshold: str | float = 2.0  # a number truncates (TIS); "lower_upper" masks (IcePop)
    rollout_is_batch_normalize: bool = False
    rollout_rs: str | None = None  # comma-separated rejection criteria, e.g. "token_k1,seq_mean_k3"
    rollout_rs_threshold: str | float | None = None
    bypass_mode: bool = choice(False, (False,), hint="bypass mode (rollout log-probs as old log-probs) is not implemented")
    loss_type: str = choice("ppo_clip", ("ppo_clip",), hint="only used by bypass mode, which is not implemented")
