"""verl's values as Hydra hands them over, normalised for comparison (the rules of :mod:`rl_verl.keys`)."""

from __future__ import annotations

from typing import Any


def norm(value: Any) -> Any:
    """verl's values as Hydra hands them over: "True" -> True, "0" -> 0, "null" -> None."""
    if isinstance(value, str):
        low = value.strip().lower()
        if low in {"true", "false"}:
            return low == "true"
        if low in {"null", "none", "~"}:
            return None
        try:
            f = float(low)
            return int(f) if f.is_integer() else f
        except ValueError:
            return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value
