"""rl-reward-model: model-based rewards for rl-core: a learned reward model (``classifier``) and an LLM
judge (``judge``), run as the reward-model role in rl-core's workers (:mod:`rl_core.rewards.model_role`).

Importing this package is cheap; torch and transformers load with the scorer modules.
"""

__version__ = "0.1.0"
