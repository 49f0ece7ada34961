"""rl-clean: ``rlcore clean RUN_DIR``, a finished run's checkpoints removed, its results kept."""
