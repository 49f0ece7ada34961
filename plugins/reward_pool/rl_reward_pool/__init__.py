"""rl-reward-pool: a process pool for rl-core's per-sample reward scorers (``reward.num_workers > 0``).

Light on purpose (the entry point ``rl_reward_pool.plugin`` imports it): the pool is :mod:`rl_reward_pool.pool`.
"""
