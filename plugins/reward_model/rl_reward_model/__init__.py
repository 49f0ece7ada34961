"""rl-reward-model: model-based rewards for rl-core: a learned reward model (``classifier``) and an LLM
judge (``judge``), run as the reward-model role in rl-core's workers (:mod:`rl_reward_model.role`), and the
rule / model weights per data source (``reward.weights``, :mod:`rl_reward_model.mixing`), core calls them through
the ``reward_model`` feature (:mod:`rl_reward_model.feature`).

Importing this package is cheap; torch and transformers load with the scorer modules.
"""

__version__ = "0.1.0"
