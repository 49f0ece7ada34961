"""rl-reward-pool's card: the feature whose object (:class:`rl_reward_pool.pool.ScorerPool`) core's reward manager
starts when ``reward.num_workers > 0``. Light: standard library only."""

from __future__ import annotations

from rl_core import hookimpl
from rl_core.cards import FeatureCard


def enabled(config) -> bool:
    """On when the config scores in worker processes (``reward.num_workers > 0``)."""
    return config.reward.num_workers > 0


@hookimpl
def rl_core_register_features(register) -> None:
    register(FeatureCard(name="reward_pool", factory="rl_reward_pool.plugin:enabled", provides="rl_reward_pool.pool:ScorerPool",
                         keys=("reward.num_workers",),
                         description="per-sample reward scorers in worker processes, each sample with a deadline (reward.num_workers)"))
