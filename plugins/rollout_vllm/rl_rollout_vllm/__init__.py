"""vLLM rollout backend for rl-core (``rollout.name=vllm``).

Importing this package does not import vLLM: the card lives in
:mod:`rl_rollout_vllm.plugin`, the engine in :mod:`rl_rollout_vllm.engine`
(vLLM is imported when the factory runs).
"""

__version__ = "0.1.0"
