"""``fn()`` in a daemon thread, abandoned when it overstays its time: what rl-core does with a call it cannot
interrupt (a reward function off the main thread, a rollout engine's generate)."""

from __future__ import annotations

import threading
from typing import Any, Callable


def run_with_timeout(fn: Callable[[], Any], timeout_s: float, overstayed: Callable[[], BaseException], name: str) -> Any:
    """``fn()``'s value or exception; ``overstayed()`` raised when it has not returned after ``timeout_s`` seconds
    (the thread is left running: a daemon, it does not keep the process alive)."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread as it is
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True, name=name)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise overstayed()
    if "error" in box:
        raise box["error"]
    return box["value"]
