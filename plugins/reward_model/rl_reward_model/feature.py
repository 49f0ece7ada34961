"""The object of rl-reward-model's ``FeatureCard`` (``reward_model``): what core calls for model-based rewards and
``reward.weights``, resolved once into the Plan (``Plan.features["reward_model"]``). Light: no torch."""

from __future__ import annotations

from typing import Any, Callable, Sequence

from rl_core.problems import Problem
from rl_core.rewards.outcome import Outcome

from rl_reward_model.memory import reward_model_terms
from rl_reward_model.mixing import RewardWeights, checked_weights, mixing_problems
from rl_reward_model.role import RewardModelRole, requests_from_batch, rounds_for, split_requests


class ModelRewards:
    """The resolver's checks, the reward manager's weights, the loop's dispatch and the workers' role."""

    def problems(self, config: Any) -> list[Problem]:
        """``reward.weights`` and a rule reward the model's score replaces (:func:`mixing_problems`)."""
        return mixing_problems(config)

    def mixing(self, config: Any) -> RewardWeights:
        """The parts (rule, model) and weights per data source the reward manager mixes."""
        rm = config.reward_model
        return checked_weights(config.reward.weights, model_name=rm.name if rm.enable else None)

    def memory_terms(self, config: Any, sizes: Any, device: str, card: Any = None) -> dict[str, float]:
        """The device estimate's reward-model terms (:func:`rl_reward_model.memory.reward_model_terms`)."""
        return reward_model_terms(config, sizes, device, card)

    def role(self, stack: Any, context: Any, *, colocated: bool) -> RewardModelRole:
        """The worker's reward-model role (builds the card's scorer)."""
        return RewardModelRole(stack, context, colocated=colocated)

    def score(self, batch: Any, rows: Sequence[int], config: Any, workers: int, call: Callable[[list], list]) -> dict[int, Outcome]:
        """The reward model's outcomes for ``rows``: their texts split evenly over ``workers`` workers, scored by
        ``call([(share, rounds), ...])`` (one result list per worker)."""
        rm = config.reward_model
        shares = split_requests(requests_from_batch(batch, rows), workers)
        rounds = rounds_for(shares, rm.micro_batch_size_per_gpu) if rm.strategy == "fsdp" else None
        results = call([(share, rounds) for share in shares])
        return {req.index: outcome for share, got in zip(shares, results) for req, outcome in zip(share, got)}


FEATURE = ModelRewards()


def enabled(config: Any) -> bool:
    """On with a reward model (``reward_model.enable``) or weighted reward parts (``reward.weights``)."""
    return bool(config.reward_model.enable or config.reward.weights)
