"""rl-hf-decode's ``rollout.engine_kwargs`` keys and the values of its choices: what its feature card lists, its check
refuses and its decoder reads. Light: no torch."""

from __future__ import annotations

ATTENTION = ("auto", "triton", "sdpa")  # decode_attention
SAMPLER = ("auto", "triton", "torch")  # decode_sampler
#: the keys of rollout.engine_kwargs it reads (static_decode: also core's hf rollout, which asks for the decoder)
KEYS = ("static_decode", "cuda_graph", "check_every", "compile", "pack_projections", "decode_chunk", "decode_attention", "decode_sampler")
