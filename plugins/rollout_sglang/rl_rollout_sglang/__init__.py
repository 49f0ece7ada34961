"""SGLang rollout backend for rl-core (``rollout.name=sglang``).

Importing this package does not import SGLang: the card lives in
:mod:`rl_rollout_sglang.plugin`, the engine in :mod:`rl_rollout_sglang.engine`
(SGLang is imported when the factory runs).
"""

__version__ = "0.1.0"
