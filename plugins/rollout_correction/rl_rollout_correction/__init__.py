"""rl-rollout-correction: the rollout / trainer mismatch of rl-core runs, as verl's ``algorithm.rollout_correction``:
truncated / masked importance sampling and rejection sampling (:mod:`rl_rollout_correction.correction`), the gap
metrics ``rollout_corr/*`` and the bound ``rollout.mismatch.max_abs_diff`` (:mod:`rl_rollout_correction.mismatch`),
``rollout.precision=fp8``'s defaults and checks (:mod:`rl_rollout_correction.precision`). The kernel calls it through
the ``rollout_correction`` feature's object (:mod:`rl_rollout_correction.feature`). README.md; docs/config.md."""
