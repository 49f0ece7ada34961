"""rl-hf-decode: the hf rollout's GPU decode loop (static KV cache, CUDA graph, packed projections) for rl-core.

Light on purpose (the entry point ``rl_hf_decode.plugin`` imports it): the decoder is :mod:`rl_hf_decode.static_decode`,
the object core's hf rollout and memory estimate call :mod:`rl_hf_decode.feature`.
"""
