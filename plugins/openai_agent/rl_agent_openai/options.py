"""``rollout.multi_turn.program``: the agent program the ``openai_agent`` loop starts per trajectory, and its limits.

Exactly one of ``callable`` (``"package.module:function"`` or ``"path/to/file.py:function"``, run in a fresh
Python process) and ``command`` (an argv list or a shell-free string split like a shell would) is set. Every key
is checked by ``rlcore check`` (:func:`program_problems`); an unknown key names the closest known one.
"""

from __future__ import annotations

import shlex
from typing import Any

import attrs
from rl_core.problems import Problem, did_you_mean

KEY = "rollout.multi_turn.program"


def _positive(_inst, attr, value):
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
        raise ValueError(f"{KEY}.{attr.name} must be a positive number, got {value!r}")


def _non_negative(_inst, attr, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ValueError(f"{KEY}.{attr.name} must be a number >= 0, got {value!r}")


def _command(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return tuple(shlex.split(value))
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise ValueError(f"{KEY}.command must be a list of strings (argv) or a string, got {value!r}")


@attrs.frozen(kw_only=True)
class ProgramOptions:
    # what to run per trajectory (exactly one)
    callable: str | None = None
    command: tuple[str, ...] | None = attrs.field(default=None, converter=_command)
    # limits (per program run)
    timeout_s: float = attrs.field(default=300.0, validator=_positive)  # wall clock; then the process group is killed
    cpu_s: float | None = attrs.field(default=None, validator=_positive)  # RLIMIT_CPU; null: off
    memory_mb: int | None = attrs.field(default=4096, validator=_positive)  # RLIMIT_AS; null: off
    max_output_bytes: int = attrs.field(default=1_000_000, validator=_positive)  # stdout + stderr (RLIMIT_FSIZE)
    max_calls: int = attrs.field(default=32, validator=_positive)  # endpoint calls per trajectory; more get 429
    max_request_bytes: int = attrs.field(default=4_000_000, validator=_positive)  # one request's body; more get 413
    max_concurrent: int | None = attrs.field(default=None, validator=_positive)  # programs running at once; null: all
    # how long the engine waits for more programs' requests before decoding a turn (they batch into one call)
    batch_wait_s: float = attrs.field(default=0.05, validator=_non_negative)
    # the score of a trajectory whose program crashed, hung (timeout) or flooded (output / calls limits)
    failure_reward: float = 0.0
    env: dict = attrs.field(factory=dict)  # extra environment variables for the program (strings)

    def __attrs_post_init__(self):
        if (self.callable is None) == (self.command is None):
            raise ValueError(f"{KEY}: set exactly one of callable (\"module:function\" or \"file.py:function\") and command (argv)")
        if self.callable is not None and (not isinstance(self.callable, str) or ":" not in self.callable):
            raise ValueError(f"{KEY}.callable must be \"package.module:function\" or \"path/to/file.py:function\", got {self.callable!r}")
        if self.command is not None and not self.command:
            raise ValueError(f"{KEY}.command is empty")
        if not isinstance(self.failure_reward, (int, float)) or isinstance(self.failure_reward, bool):
            raise ValueError(f"{KEY}.failure_reward must be a number, got {self.failure_reward!r}")
        if not isinstance(self.env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in self.env.items()):
            raise ValueError(f"{KEY}.env must map names to strings, got {self.env!r}")


FIELDS = tuple(a.name for a in attrs.fields(ProgramOptions))


def program_options(mt) -> ProgramOptions:
    """The options of ``rollout.multi_turn.program`` (a ValueError naming the key on a bad one)."""
    raw = dict(getattr(mt, "program", None) or {})
    unknown = sorted(set(raw) - set(FIELDS))
    if unknown:
        raise ValueError(f"{KEY}: unknown key {unknown[0]!r}{did_you_mean(unknown[0], FIELDS)} (known: {', '.join(FIELDS)})")
    return ProgramOptions(**raw)


def program_problems(mt) -> list[Problem]:
    try:
        program_options(mt)
    except (ValueError, TypeError) as exc:
        what = str(exc).removeprefix(f"{KEY}: ").removeprefix(f"{KEY}.")  # the key is the problem's own
        return [Problem(key=KEY, what=what, fix="see docs/agents.md, \"Agents written against the OpenAI API\"")]
    return []
