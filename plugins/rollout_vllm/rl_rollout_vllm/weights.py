"""Weight-sync buckets: pure grouping of HF-named tensors, no vLLM import.

vLLM (0.32) reloads weights *layer-wise*: every ``reload_weights`` call first
detaches all layers, then processes a layer once all of its checkpoint
tensors have arrived, and at the end puts back the old tensors of layers
that received nothing. A layer that receives only part of its tensors in one
call (say ``q_proj`` but not ``k_proj`` of the fused ``qkv_proj``) would be
processed with uninitialised memory for the rest. So a bucket may end only
between layers: :func:`layer_key` says which layer a name belongs to and
:func:`buckets` never splits one, and raises if a layer's tensors come back
after its bucket was sent.
"""

from __future__ import annotations

import re
from typing import Iterable, Iterator

import torch

_LAYER = re.compile(r"^(.*?\.(?:layers|layer|h|blocks)\.\d+)\.")


def layer_key(name: str) -> str:
    """``model.layers.3.mlp.up_proj.weight`` -> ``model.layers.3``; others -> their module."""
    m = _LAYER.match(name)
    if m:
        return m.group(1)
    return name.rsplit(".", 1)[0] if "." in name else name


def buckets(weights: Iterable[tuple[str, torch.Tensor]], max_bytes: int) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """Consecutive ``(name, tensor)`` groups of about ``max_bytes``, never splitting a layer.

    A bucket is closed before a tensor of a *new* layer that would push it
    past ``max_bytes``; the tensors of one layer always share a bucket, so a
    bucket holds at most ``max_bytes`` plus one layer (a single layer larger
    than ``max_bytes`` makes a bucket of its own).
    """
    if max_bytes <= 0:
        raise ValueError(f"bucket size must be positive, got {max_bytes} bytes")
    current: list[tuple[str, torch.Tensor]] = []
    size = 0
    keys_in_current: set[str] = set()
    sent: set[str] = set()
    last_key: str | None = None
    for name, tensor in weights:
        key = layer_key(name)
        if key in sent:
            raise ValueError(
                f"weight sync: {name!r} arrives after other tensors of {key!r} were already loaded; "
                "the train backend must yield each layer's tensors together (or set "
                "rollout.engine_kwargs.weight_sync_bucket_mb=0 to send everything in one streaming call)"
            )
        nbytes = tensor.numel() * tensor.element_size()
        if current and key != last_key and key not in keys_in_current and size + nbytes > max_bytes:
            yield current
            sent |= keys_in_current
            current, size, keys_in_current = [], 0, set()
        current.append((name, tensor))
        keys_in_current.add(key)
        size += nbytes
        last_key = key
    if current:
        yield current
