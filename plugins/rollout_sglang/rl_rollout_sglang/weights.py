"""Weight sync: size-bounded buckets of HF-named tensors and their checks, no SGLang import.

SGLang's ``update_weights_from_tensor`` hands each tensor to the model's own
``load_weights``, which loads fused parameters (``qkv_proj``, ``gate_up_proj``)
shard by shard, so a bucket may end anywhere: buckets are bounded by bytes only.
"""

from __future__ import annotations

import logging
import os
from typing import Iterable, Iterator

import torch

log = logging.getLogger(__name__)


def buckets(weights: Iterable[tuple[str, torch.Tensor]], max_bytes: int) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """Consecutive ``(name, tensor)`` groups of at most ``max_bytes`` (a larger tensor goes alone)."""
    if max_bytes <= 0:
        raise ValueError(f"bucket size must be positive, got {max_bytes} bytes")
    current: list[tuple[str, torch.Tensor]] = []
    size = 0
    for name, tensor in weights:
        nbytes = tensor.numel() * tensor.element_size()
        if current and size + nbytes > max_bytes:
            yield current
            current, size = [], 0
        current.append((name, tensor))
        size += nbytes
    if current:
        yield current


def model_shapes(config) -> dict[str, tuple[int, ...]] | None:
    """HF name -> shape of every tensor of the configured model, from a meta-device build (no memory).

    None when it cannot be built here (the check is then skipped, with a log line).
    """
    m = config.model
    try:
        from transformers import AutoConfig, AutoModelForCausalLM

        hf_cfg = AutoConfig.from_pretrained(os.path.expanduser(m.path), trust_remote_code=m.trust_remote_code)
        for key, value in (m.override_config or {}).items():
            setattr(hf_cfg, key, value)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(hf_cfg, trust_remote_code=m.trust_remote_code)
        return {name: tuple(t.shape) for name, t in model.state_dict().items()}
    except Exception as exc:  # noqa: BLE001 - validation is a convenience, never a reason not to run
        log.info("weight sync: names and shapes will not be checked (%s: %s)", type(exc).__name__, exc)
        return None


def check_tensor(shapes: dict[str, tuple[int, ...]] | None, name: str, tensor: torch.Tensor) -> None:
    """Raise naming the tensor when the rollout model has no tensor of that name or another shape."""
    if shapes is None:
        return
    want = shapes.get(name)
    if want is None:
        known = ", ".join(list(shapes)[:4])
        raise ValueError(
            f"load_weights: unexpected weight {name!r}: the rollout model has no tensor of that name "
            f"(its names look like {known}, ...); is the trainer's model the same architecture?"
        )
    if tuple(tensor.shape) != want:
        raise ValueError(f"load_weights: weight {name!r} has shape {tuple(tensor.shape)} but the rollout model's is {want}")
