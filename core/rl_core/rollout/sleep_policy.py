"""When the ``hf`` rollout's ``sleep()`` frees device memory, and when it keeps it.

Sleeping moves the engine's weights to host memory and drops its static KV caches and captured CUDA
graphs; waking moves the weights back, and the next rollout captures its graphs again. For a small
engine that costs more than it gives: on an H100 with a 0.5B model it was ~1 GiB freed for a few
hundred milliseconds of copies and captures per step, next to a trainer holding ~10 GiB of fp32 weights
and AdamW state. So the engine keeps what it holds while that is at most
``rollout.engine_kwargs.sleep_threshold`` of the device's memory (default 0.1; 0 frees on every sleep,
as vLLM's sleep mode does) and frees it otherwise. ``rlcore check``'s memory estimate applies the same
rule (:mod:`rl_core.plan.memory`).
"""

from __future__ import annotations

DEFAULT_THRESHOLD = 0.1


def keeps_through_sleep(held_bytes: float, device_bytes: float | None, threshold: float = DEFAULT_THRESHOLD) -> bool:
    """Whether an engine holding ``held_bytes`` (weights + caches) on a device of ``device_bytes`` keeps them asleep."""
    if not device_bytes or threshold <= 0:
        return False
    return held_bytes <= threshold * device_bytes


def threshold_of(engine_kwargs) -> float:
    value = (engine_kwargs or {}).get("sleep_threshold", DEFAULT_THRESHOLD)
    return float(value)
