"""rl-data: prompt data for rl-core: `rlcore data` (GSM8K from the hub or a file, reasoning-gym sets) and the
``reasoning_gym`` generator of ``data.*_generator``."""
