"""rl-exact: exact on-policy training for rl-core (``rollout.exact=true``; docs/exact.md).

The hf rollout and the fsdp trainer compute a response's log-probs with one canonical per-sequence forward
(:func:`rl_exact.forward.sequence_log_probs`, registered as the ``exact`` LogProbForwardCard), so the two agree bit for
bit; :mod:`rl_exact.checks` refuses what cannot be exact. The gap metrics (``rollout_corr/*``) and the bound
(0 in exact mode) are rl-rollout-correction's (:mod:`rl_rollout_correction.mismatch`, a dependency);
``trainer.deterministic`` stays in rl-core (:mod:`rl_core.util.determinism`).
"""
