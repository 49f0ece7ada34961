"""Rollout traces for rl-core: each step's rollouts (and each validation's) written by the controller as parquet under
``<output_dir>/traces``, bounded by a budget and resumed with the run; ``rlcore traces RUN_DIR`` writes one
self-contained HTML page of them, ``--export STEP`` a step's prompts and responses as a data set."""

__version__ = "0.1.0"
