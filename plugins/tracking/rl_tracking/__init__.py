"""rl-tracking: metric loggers for rl-core beyond its own console and jsonl: tensorboard and wandb (``trainer.loggers``)."""
