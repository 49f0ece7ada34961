"""What rl-core calls: the object the ``rollout_correction`` FeatureCard provides (``Plan.features.get("rollout_correction")``;
docs/plugins.md, "Cross-cutting features"). Light: torch is imported where a step calls."""

from __future__ import annotations

from typing import Any

from rl_rollout_correction.options import correction_on, in_update, update_correction
from rl_rollout_correction.precision import apply_defaults


class RolloutCorrection:
    """The rollout correction's seam in the kernel: the resolver's defaults and log-prob users, the loop's correction
    of each step's batch and its gap metrics, the update's in-forward weights."""

    def defaults(self, config: Any) -> Any:
        """``rollout.precision=fp8``: log-probs and truncated importance sampling on where the config left them off."""
        return apply_defaults(config)

    def log_prob_users(self, config: Any) -> list[str]:
        """The keys of this package that need the rollout's log-probs every step (rl_core.rollout.log_prob_decision)."""
        rc = config.algorithm.rollout_correction
        users = {"algorithm.rollout_correction.rollout_is": rc.rollout_is is not None,
                 "algorithm.rollout_correction.rollout_rs": rc.rollout_rs is not None,
                 "rollout.mismatch.max_abs_diff": config.rollout.mismatch.max_abs_diff is not None}
        return [key for key, on in users.items() if on]

    def on(self, config: Any) -> bool:
        """Whether the config asks for importance weights or rejection."""
        return correction_on(config)

    def needs_old_log_prob_pass(self, config: Any) -> bool:
        """The weights compare the rollout's log-probs with pi_old's: a separate pass first, unless an on-policy update can
        weight each row from its own forward (:func:`rl_rollout_correction.options.in_update`)."""
        return correction_on(config) and not in_update(config)

    def correct(self, batch: Any, config: Any) -> dict[str, float]:
        """A step's batch with old and rollout log-probs: the response mask after rejection, ``rollout_is_weights`` (the
        policy loss multiplies them) and the ``rollout_corr/*`` metrics."""
        from rl_rollout_correction.correction import rollout_correction

        weights, new_mask, metrics = rollout_correction(batch["old_log_probs"], batch["rollout_log_probs"], batch["response_mask"],
                                                        config.algorithm.rollout_correction)
        batch["response_mask"] = new_mask
        if weights is not None:
            batch["rollout_is_weights"] = weights
        return metrics

    def update_metrics(self, old: Any, computed: Any, rollout: Any, mask: Any, config: Any) -> dict[str, float]:
        """``rollout_corr/*`` of the rows whose old log-probs an on-policy update ``computed`` (:func:`mismatch_metrics`)."""
        return mismatch_metrics(old, computed, rollout, mask, config.algorithm.rollout_correction)

    def gap(self, step: int, trainer: Any, valid: Any, batch: Any, config: Any, tokenizer: Any = None) -> dict[str, float]:
        """``rollout_corr/log_prob_gap_frac`` and the bound ``rollout.mismatch.max_abs_diff`` (raises
        :class:`rl_rollout_correction.mismatch.MismatchError`) of the rollout's log-probs against ``trainer``'s."""
        from rl_rollout_correction import mismatch

        r = config.rollout
        mismatch.check_gap(trainer, batch["rollout_log_probs"], valid, bound=mismatch.bound_of(config), step=step, backend=r.name,
                           batch=batch, tokenizer=tokenizer, exact=r.exact)
        return mismatch.gap_metrics(trainer, batch["rollout_log_probs"], valid, r.mismatch.threshold)

    def update_correction(self, role: str, config: Any, on_policy: bool) -> Any:
        """``algorithm.rollout_correction`` when this on-policy update weights its loss itself, else None."""
        return update_correction(role, config, on_policy)

    def row_weights(self, log_probs: Any, rollout_log_probs: Any, mask: Any, correction: Any) -> Any:
        """The weights of an in-update correction, from the update forward's own (pi_old's) log-probs."""
        from rl_rollout_correction.correction import row_weights

        return row_weights(log_probs, rollout_log_probs, mask, correction)


def mismatch_metrics(old: Any, computed: Any, rollout: Any, mask: Any, rc: Any = None) -> dict[str, float]:
    """``rollout_corr/*`` metrics of the rows whose old log-probs the update ``computed`` (rows it left out for a
    zero advantage are not in them); {} when there are none. ``rc`` (``algorithm.rollout_correction``): with
    importance weights on, the weights' metrics too (the update applied them itself: options.in_update)."""
    from rl_rollout_correction.correction import offpolicy_metrics, rollout_correction

    rows = computed & mask.bool().any(-1)
    if not rows.any():
        return {}
    if rc is not None and rc.rollout_is is not None:
        return rollout_correction(old[rows], rollout[rows], mask[rows], rc)[2]
    got = offpolicy_metrics(old[rows], rollout[rows], mask[rows].bool())
    return {f"rollout_corr/{k}": v for k, v in got.items()}


def enabled(config: Any) -> bool:
    """The FeatureCard's ``enabled``: the gap metrics run whenever the rollout returns log-probs, so always."""
    return True


#: the FeatureCard's ``provides``
CORRECTION = RolloutCorrection()
