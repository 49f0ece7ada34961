"""The built-in `hf` rollout against the shared rollout conformance suite."""

from __future__ import annotations

from rl_core.backends import WorkerContext
from rl_core.rollout.hf import factory
from rl_core_testing.rollout_conformance import RolloutConformance

try:  # the multi-turn case is rl-agent's (plugins/agent); without it installed, it is not collected
    from rl_agent.conformance import MultiTurnConformance
except ImportError:  # pragma: no cover
    MultiTurnConformance = object  # type: ignore[misc,assignment]


class TestHFRolloutLlama(RolloutConformance, MultiTurnConformance):
    """fp32 transformers: log-probs agree with a plain forward pass to 1e-5."""

    logprob_atol = 1e-5
    arch = "llama"
    supports_multi_turn = True

    def make_engine(self, model_dir, config, context=None):
        return factory(config, context or WorkerContext())


class TestHFRolloutQwen2(TestHFRolloutLlama):
    """Tied embeddings and attention biases (the bigram tests skip: they need an untied head)."""

    arch = "qwen2"
