"""The checks of rl-algorithms' DAPO features (registered as CheckCards by :mod:`rl_algorithms.plugin`; they were
cross-key rules of core's schema): the overlong penalty's buffer, dynamic sampling's metric and where it can run."""

from __future__ import annotations

from typing import Any

from rl_core.plugins import UnknownCardError
from rl_core.problems import Problem

#: the filter metrics computed from the scores themselves; any other name is a key of the reward function's dict
FILTER_METRICS = ("acc", "score", "seq_reward", "seq_final_reward")


def overlong_penalty_problems(cfg: Any, registry: Any = None) -> list[Problem]:
    """reward.overlong_penalty: a buffer is set and fits in the length it is counted back from."""
    o = cfg.reward.overlong_penalty
    if not o.enable:
        return []
    longest = o.max_response_length or cfg.data.max_response_length
    if o.buffer_length is None:
        return [Problem(key="reward.overlong_penalty.buffer_length", what="is not set while reward.overlong_penalty.enable=true",
                        fix="set the tokens before the maximum length where the penalty starts, e.g. reward.overlong_penalty.buffer_length=" + str(max(1, longest // 4)))]
    if o.buffer_length > longest:
        return [Problem(key="reward.overlong_penalty.buffer_length",
                        what=f"is {o.buffer_length}, longer than the maximum response length {longest} it is counted back from",
                        fix=f"set it to at most {longest} (nearest valid: {longest})")]
    return []


def filter_groups_problems(cfg: Any, registry: Any = None) -> list[Problem]:
    """algorithm.filter_groups: a metric that exists when the filter runs, the synchronous loop, no greedy baseline."""
    f = cfg.algorithm.filter_groups
    if not f.enable:
        return []
    if not f.metric:
        return [Problem(key="algorithm.filter_groups.metric", what="is not set while algorithm.filter_groups.enable=true",
                        fix="name the value whose spread keeps a group: " + " / ".join(FILTER_METRICS) + " or a key your reward function returns")]
    if f.metric == "seq_final_reward" and cfg.algorithm.use_kl_in_reward:
        return [Problem(key="algorithm.filter_groups.metric", what="is 'seq_final_reward' (the reward after the KL penalty) with algorithm.use_kl_in_reward=true: "
                        "rl-core filters before the log-prob passes, so that reward does not exist yet",
                        fix="use metric=seq_reward (the reward before the KL penalty) or acc")]
    if cfg.rollout.n_gpus_per_node is not None:
        return [Problem(key="algorithm.filter_groups.enable", what="is true with a rollout pool of its own (rollout.n_gpus_per_node, asynchronous RL): "
                        "dynamic sampling runs in the synchronous loop only", fix="unset rollout.n_gpus_per_node, or algorithm.filter_groups.enable=false")]
    name = cfg.algorithm.adv_estimator
    try:
        greedy = registry is not None and registry.get("estimator", name).needs_greedy_baseline
    except UnknownCardError:  # the resolver names an unknown estimator
        greedy = False
    if greedy:
        return [Problem(key="algorithm.filter_groups.enable",
                        what=f"is true with algorithm.adv_estimator={name}, whose greedy baseline is generated for the step's prompts: "
                        "dynamic sampling draws its prompts over several rounds, and rl-core does not generate a baseline per round",
                        fix="set algorithm.filter_groups.enable=false, or use a group estimator (e.g. algorithm.adv_estimator=grpo)")]
    return []
