"""rl-eval: ``rlcore eval``, validation only: a run's final model (or any model) scored per data source."""
