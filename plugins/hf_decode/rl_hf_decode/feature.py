"""The object of rl-hf-decode's ``FeatureCard`` (``hf_decode``): what core's hf rollout and memory estimate call,
resolved once into the Plan and handed to the engines as ``WorkerContext.features["hf_decode"]``."""

from __future__ import annotations

import warnings
from typing import Any

from rl_hf_decode.static_decode import ARCHS, CACHE_ROUND, DEFAULT_CHUNK, StaticDecoder, unsupported_reason


def enabled(config: Any) -> bool:
    """The hf rollout may decode with it: ``rollout.name=hf`` and ``engine_kwargs.static_decode`` not false."""
    return config.rollout.name == "hf" and (config.rollout.engine_kwargs or {}).get("static_decode") is not False


class HFDecodeFeature:
    """The hf rollout's decoder (:meth:`decoder`) and the size of the cache it allocates (:meth:`cache_size`)."""

    def decoder(self, model: Any, kwargs: dict, *, share_weights: bool = False, generation_batch_size: int | None = None) -> StaticDecoder | None:
        """A :class:`StaticDecoder` for ``model`` from ``rollout.engine_kwargs``; None (the plain loop) for a model it
        does not cover, with a warning when ``static_decode=true`` asked for it."""
        reason = unsupported_reason(model)
        if reason:
            if kwargs.get("static_decode"):
                warnings.warn(f"rollout.engine_kwargs.static_decode=true but {reason}: the hf rollout uses its plain decode loop", stacklevel=4)
            return None
        device = next(model.parameters()).device
        chunk = kwargs.get("decode_chunk")
        return StaticDecoder(
            model,
            cuda_graph=bool(kwargs.get("cuda_graph", True)),
            check_every=int(kwargs.get("check_every", 16)),
            compile=bool(kwargs.get("compile", device.type == "cuda")),
            # packing copies the projections: an engine adopting the trainer's tensors (share_weights) would stop sharing
            pack=bool(kwargs.get("pack_projections", True)) and not share_weights,
            chunk=DEFAULT_CHUNK if chunk is None else chunk, auto_chunk=chunk is None,
            attention=kwargs.get("decode_attention", "auto"), sampler=kwargs.get("decode_sampler", "auto"),
            fix=f"lower rollout.generation_batch_size (sequences decoded at once; now {generation_batch_size or 'unset: the whole batch'}), "
                f"rollout.n, data.max_response_length or data.max_prompt_length",
        )

    def cache_size(self, config: Any, model_type: str | None, device: str, sequences: int, tokens: int) -> tuple[int, int]:
        """``(rows, slots)`` of the hf rollout's KV cache for ``sequences`` of ``tokens`` (prompt + response): where the
        static decoder runs (the hf rollout on a GPU, or with ``static_decode=true``, for a Llama-family model) it
        allocates it whole, rows padded to a power-of-two bucket and slots rounded up to 128; elsewhere the plain
        loop's cache grows to ``sequences x tokens``."""
        wanted = (config.rollout.engine_kwargs or {}).get("static_decode")
        static = config.rollout.name == "hf" and (wanted is True or (wanted is None and device.startswith("cuda"))) and model_type in ARCHS
        if not static or sequences < 1:
            return sequences, tokens
        return 1 << (sequences - 1).bit_length(), -(-tokens // CACHE_ROUND) * CACHE_ROUND


FEATURE = HFDecodeFeature()
