"""rl-algorithms' config sections (ConfigSectionCards: rl_core.config.sections), read and checked with core's own
sections: ``algorithm.filter_groups`` (DAPO's dynamic sampling) and ``reward.overlong_penalty`` (DAPO's overlong penalty)."""

from __future__ import annotations

import attrs
from rl_core.config.schema import num, pos


@attrs.frozen(kw_only=True)
class FilterGroupsConfig:
    """DAPO's dynamic sampling (rl-algorithms: rl_algorithms.dynamic_sampling): generate rounds of data.gen_batch_size prompts,
    drop the groups whose ``metric`` is the same for all n samples, until data.train_batch_size groups are kept."""

    enable: bool = False
    # acc (the reward's "acc", else its score), score (before the overlong penalty), seq_reward (after it),
    # seq_final_reward (= seq_reward: rl-core refuses it with algorithm.use_kl_in_reward), or a numeric key the
    # reward function returns in its dict
    metric: str | None = None
    max_num_gen_batches: int = num(0, ge=0, hint="rounds per step before the run stops; 0 for no limit")


@attrs.frozen(kw_only=True)
class OverlongPenaltyConfig:
    """DAPO's overlong-response penalty (rl-algorithms: rl_algorithms.overlong): a training response of n tokens gets
    ``min(0, -(n - (max_response_length - buffer_length)) / buffer_length * penalty_factor)`` added to its reward."""

    enable: bool = False
    buffer_length: int | None = pos(None, hint="tokens before the maximum where the penalty starts, e.g. 4096")
    penalty_factor: float = num(1.0, ge=0, hint="the penalty at the maximum length, e.g. 1.0")
    max_response_length: int | None = pos(None, hint="null: data.max_response_length")
    log: bool = False  # reward/overlong_penalty_mean and reward/overlong_fraction in the metrics
