"""Problems: what the config loader, normaliser and resolver report to users: the key at fault, what is wrong, why and
what to set. They are collected, not raised one at a time, so a user sees everything wrong with a config at once."""

from __future__ import annotations

import difflib
from typing import Iterable

import attrs
from rl_core.util.secrets import mask_text


@attrs.frozen(kw_only=True)
class Problem:
    key: str
    what: str
    fix: str = ""
    why: str = ""
    severity: str = attrs.field(default="error", validator=attrs.validators.in_(("error", "warning")))

    def render(self) -> str:
        text = f"{self.key}: {self.what}"
        if self.why:
            text += f"\n    why: {self.why}"
        if self.fix:
            text += f"\n    fix: {self.fix}"

        return mask_text(text)


class UserError(Exception):
    """An error in the user's input: the CLI prints it without a traceback (``RL_CORE_DEBUG=1`` shows one)."""


class ConfigError(UserError, ValueError):
    """Raised with one or more problems when a config cannot be used."""

    def __init__(self, problems: Iterable[Problem]):
        self.problems = list(problems)
        super().__init__("\n".join(p.render() for p in self.problems))


def errors(problems: Iterable[Problem]) -> list[Problem]:
    return [p for p in problems if p.severity == "error"]


def did_you_mean(word: str, options: Iterable[str], *, cutoff: float = 0.6) -> str:
    """' (did you mean 'x'?)' when a close match exists, else ''."""
    match = difflib.get_close_matches(word, list(options), n=1, cutoff=cutoff)
    return f" (did you mean {match[0]!r}?)" if match else ""


def nearest_divisors(value: int, of: int) -> list[int]:
    """Divisors of ``of`` nearest to ``value`` (one below, one above when they exist)."""
    divisors = [d for d in range(1, of + 1) if of % d == 0]
    below = [d for d in divisors if d <= value]
    above = [d for d in divisors if d >= value]
    out = []
    if below:
        out.append(below[-1])
    if above and above[0] not in out:
        out.append(above[0])
    return out
