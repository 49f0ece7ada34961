"""A tool call cannot end the run: exit attempts and results that are not text become failed calls.

As reward functions are contained (:func:`rl_core.rewards.scoring.call_contained`), a tool's ``sys.exit`` /
``SystemExit``, ``KeyboardInterrupt`` and ``os._exit`` become :class:`ToolExit` (an ordinary exception the call
reports as a tool error). ``os._exit`` is replaced, once, by a guard that refuses it only in a thread that is
running a tool (marked by :func:`tool_thread`; in this process, not in a child it forks) and passes every
other call on to the real one. A tool thread's ``KeyboardInterrupt`` is never a user's Ctrl-C: rl-core's
signal handlers run in the main thread, and tools never do.

:func:`result_problem`: a result that is not text a tokenizer can encode (a lone surrogate), or one larger
than :data:`MAX_RESULT_CHARS` (a flood), is a failed call (status ``bad_result``), not a crash later in the
tokenizer or a rollout that runs out of memory.

Not containable in-process: a tool that kills its own process (``os.kill``), a crash in C code, a sync tool
whose thread never returns (abandoned and counted, :func:`rl_agent.tools.hung_calls`), an ``async`` tool that
blocks the event loop without awaiting. The built-in ``python`` tool runs code in a separate process instead.
"""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Any, Callable

MAX_RESULT_CHARS = 1_000_000

_REAL_EXIT = os._exit
_local = threading.local()


class ToolExit(RuntimeError):
    """A tool tried to end the process (the message says how); its call fails, the run goes on."""


class _ExitCalled(BaseException):
    """Raised in place of ``os._exit`` in a tool thread (a BaseException: the tool's ``except Exception`` passes it on)."""


def _guarded_exit(code: int = 0) -> None:
    if getattr(_local, "depth", 0) and getattr(_local, "pid", None) == os.getpid():
        raise _ExitCalled(code)
    _REAL_EXIT(code)


@contextlib.contextmanager
def tool_thread():
    """Mark the current thread as running a tool (``os._exit`` refused in it) for the ``with`` block."""
    if os._exit is not _guarded_exit:  # (re)installed: a reward call's own guard restores what it found
        os._exit = _guarded_exit
    # a count, not a saved value: async tools on one event loop enter and leave in any order
    _local.depth, _local.pid = getattr(_local, "depth", 0) + 1, os.getpid()
    try:
        yield
    finally:
        _local.depth -= 1


def _exit_error(name: str, exc: BaseException) -> ToolExit:
    if isinstance(exc, _ExitCalled):
        how = f"called os._exit({exc.args[0]!r})"
    elif isinstance(exc, SystemExit):
        how = f"raised SystemExit({exc.code!r}) (sys.exit)"
    else:
        how = f"raised {type(exc).__name__}"
    return ToolExit(f"the tool {name} {how}; a tool may not end the run")


def call_sync(name: str, fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    """``fn(**kwargs)`` in this (tool) thread; an exit attempt is :class:`ToolExit`."""
    with tool_thread():
        try:
            return fn(**kwargs)
        except (SystemExit, KeyboardInterrupt, _ExitCalled) as exc:
            raise _exit_error(name, exc) from None


async def call_async(name: str, fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    """``await fn(**kwargs)``; an exit attempt is :class:`ToolExit` (asyncio would re-raise it out of the event loop)."""
    with tool_thread():
        try:
            return await fn(**kwargs)
        except (SystemExit, KeyboardInterrupt, _ExitCalled) as exc:
            raise _exit_error(name, exc) from None


def result_problem(name: str, result: Any, limit: int = MAX_RESULT_CHARS) -> str | None:
    """Why ``result`` cannot be a tool message (None when it can)."""
    if not isinstance(result, str):
        return f"the tool {name} returned {type(result).__name__}, not text"
    if len(result) > limit:
        return f"the tool {name} returned {len(result):,} characters, more than {limit:,}"
    try:
        result.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"the tool {name} returned text that is not valid Unicode ({exc.reason} at character {exc.start})"
    return None
