"""When the ``hf`` rollout's ``sleep()`` frees device memory, and when it keeps it.

Freeing a small engine (weights to host memory, caches and CUDA graphs dropped, all rebuilt at wake-up) costs more
than it gives, so the engine keeps what it holds while that is at most ``rollout.engine_kwargs.sleep_threshold`` of
the device's memory (default 0.1; 0 frees on every sleep, as vLLM's sleep mode does). ``rlcore check``'s memory
estimate applies the same rule (:mod:`rl_core.plan.memory`).
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
