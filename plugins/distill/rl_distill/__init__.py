"""On-policy distillation for rl-core (issue 50): a ``teacher`` log-prob role and the ``distill`` advantage estimator."""
