"""``model.compile``: ``torch.compile`` each decoder layer in place, micro-batch dims dynamic (the FSDP actor /
critic / ref models; rl_core.config.normalize.resolve_compile decides whether a run compiles)."""

from __future__ import annotations

import functools
from typing import Any, Mapping

import torch
from rl_core.modeling import decoder_layers


def compile_decoder_layers(model: torch.nn.Module, *, backend: Any = "inductor") -> int:
    """``torch.compile`` each decoder layer in place; returns how many (``model.compile``).

    Per block, as torchtitan does: the norms, rotary embedding, activation and residual adds of a block
    fuse into a few kernels in the forward and the backward, while the rest of the model (embeddings, the
    chunked LM head, the loss) stays eager. The blocks share one compiled graph (same code, parameters as
    inputs). Rows and sequence / packed token lengths vary between micro-batches: they are compiled
    dynamic from the first call (:func:`_mark_varying_dims`), feature sizes (hidden, heads, head_dim) stay
    static, so a new micro-batch shape does not recompile (a recompile is slow).
    Not covered: a first micro-batch of one row (dynamo always specializes size 1) recompiles once at the
    next row count; packed rows graph-break at their attention (``torch.compiler.disable``), and the frames
    after the break take intermediate tensors, unmarked: they still recompile once at a new token count.
    Works under FSDP2 (compile first, then shard) and gradient checkpointing. ``backend``: torch.compile's
    (tests pass a cheap one).

    A call that carries a KV cache (the shared-prompt forward of :mod:`rl_core.train_engine.shared_prompt`, a
    generation through these layers) runs the layer eagerly: dynamo guards on the cache object, i.e. on each
    layer's ``layer_idx`` (one graph per layer), on whether the cache's layer is filled yet and on the cache
    tensors' sizes (unmarked), so every step would recompile each layer until the cache-size limit. The cache-free
    forwards (training, log-prob passes) stay compiled; ``tests/core/test_compile_recompiles.py`` counts compiles.
    """
    import torch._dynamo

    layers = decoder_layers(model)
    # one entry per distinct guard set (grad mode, ...) and per block, well above the default of 8
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
    # transformers' hub-kernel layers (the `kernels` package, which transformers 5.25 requires: its norms' forward)
    # set a context variable; under gradient checkpointing dynamo refuses that side effect and the whole layer ran
    # eagerly, uncompiled, without a word (0 compiles). The variable is set and reset inside the forward, so the
    # recompute in the backward need not replay it.
    if hasattr(torch._dynamo.config, "skip_fwd_side_effects_in_bwd_under_checkpoint"):
        torch._dynamo.config.skip_fwd_side_effects_in_bwd_under_checkpoint = True
    for layer in layers:
        layer.compile(backend=backend)
        layer._compiled_call_impl = _marking_varying_dims(layer._compiled_call_impl, layer._call_impl)
    return len(layers)


CACHE_KWARGS = ("cache", "past_key_values", "past_key_value")  # a decoder layer's KV-cache keyword, new and old names


def _marking_varying_dims(compiled, eager):
    """``compiled`` called after :func:`_mark_varying_dims` on its inputs (outside the compiled frame, where
    dynamo forbids marking; ``nn.Module.__call__`` calls ``_compiled_call_impl`` with the layer's arguments);
    ``eager`` for a call with a KV cache (see :func:`compile_decoder_layers`)."""

    @functools.wraps(compiled)
    def call(*args, **kwargs):
        if any(kwargs.get(name) is not None for name in CACHE_KWARGS):
            return eager(*args, **kwargs)
        _mark_varying_dims(args, kwargs)
        return compiled(*args, **kwargs)

    return call


def _mark_varying_dims(args: tuple, kwargs: Mapping[str, Any]) -> None:
    """Mark the micro-batch dims of a decoder layer's tensor inputs dynamic (``maybe_mark_dynamic``).

    ``hidden_states [b, t, hidden]``, rotary ``(cos, sin) [b, t, head_dim]``: every dim but the last (features);
    ``position_ids [b, t]``, packed ``rlcore_seqlens [n]``, any 1-D / 2-D tensor and ``attention_mask`` (``[b, 1, q, k]``):
    every dim. ``maybe_mark_dynamic``, not ``mark_dynamic``: a dim the layer's code fixes (or of size 0 / 1,
    which dynamo always specializes) stays static instead of raising.
    """
    from torch._dynamo import maybe_mark_dynamic

    for name, value in [*enumerate(args), *kwargs.items()]:
        for t in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(t, torch.Tensor) and t.ndim:
                every = t.ndim <= 2 or name == "attention_mask"
                maybe_mark_dynamic(t, list(range(t.ndim if every else t.ndim - 1)))
