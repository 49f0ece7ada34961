"""When the ``hf`` rollout's ``sleep()`` frees device memory: freeing a small engine costs more than it gives, so it keeps
what it holds while that is at most ``rollout.engine_kwargs.sleep_threshold`` of the device (0: always frees). The
memory estimate applies the same rule."""

from __future__ import annotations

DEFAULT_THRESHOLD = 0.1


def keeps_through_sleep(held_bytes: float, device_bytes: float | None, threshold: float = DEFAULT_THRESHOLD) -> bool:
    """Whether an engine holding ``held_bytes`` (weights + caches) on a device of ``device_bytes`` keeps them asleep."""
    if not device_bytes or threshold <= 0:
        return False
    return held_bytes <= threshold * device_bytes


def threshold_of(engine_kwargs) -> float:
    return float((engine_kwargs or {}).get("sleep_threshold", DEFAULT_THRESHOLD))
