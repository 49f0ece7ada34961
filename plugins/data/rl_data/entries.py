"""Data-set entries as JSON text that keeps their Python types: the contract between a generator (rl-data's), which
stores each item in its row's ``extra_info`` (:func:`encode_entry`), and the reward scoring it (rl-reward-rule, which
depends on rl-data for it: :func:`decode_entry`). Tuples, sets, non-string keys and datetimes are tagged as one-key objects.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

_TAGS = ("__tuple__", "__set__", "__frozenset__", "__items__", "__datetime__", "__date__", "__time__", "__timedelta__")


def _tag(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, list):
        return [_tag(v) for v in value]
    if isinstance(value, tuple):
        return {"__tuple__": [_tag(v) for v in value]}
    if isinstance(value, frozenset):
        return {"__frozenset__": [_tag(v) for v in value]}
    if isinstance(value, set):
        return {"__set__": [_tag(v) for v in value]}
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value) and not (len(value) == 1 and next(iter(value)) in _TAGS):
            return {k: _tag(v) for k, v in value.items()}
        return {"__items__": [[_tag(k), _tag(v)] for k, v in value.items()]}
    if isinstance(value, dt.datetime):
        return {"__datetime__": value.isoformat()}
    if isinstance(value, dt.date):
        return {"__date__": value.isoformat()}
    if isinstance(value, dt.time):
        return {"__time__": value.isoformat()}
    if isinstance(value, dt.timedelta):
        return {"__timedelta__": value.total_seconds()}
    raise TypeError(f"cannot store a {type(value).__name__} as JSON")


def _untag(obj: dict) -> Any:
    if len(obj) != 1:
        return obj
    (key, value), = obj.items()
    if key == "__tuple__":
        return tuple(value)
    if key == "__set__":
        return set(value)
    if key == "__frozenset__":
        return frozenset(value)
    if key == "__items__":
        return {(tuple(k) if isinstance(k, list) else k): v for k, v in value}
    if key == "__datetime__":
        return dt.datetime.fromisoformat(value)
    if key == "__date__":
        return dt.date.fromisoformat(value)
    if key == "__time__":
        return dt.time.fromisoformat(value)
    if key == "__timedelta__":
        return dt.timedelta(seconds=value)
    return obj


def encode_entry(entry: Any) -> str | None:
    """A generated item as JSON that keeps tuples, sets, non-string keys and datetimes; None if impossible."""
    try:
        return json.dumps(_tag(entry))
    except (TypeError, ValueError):
        return None


def decode_entry(text: str) -> Any:
    """Inverse of :func:`encode_entry` (plain JSON decodes as plain JSON)."""
    return json.loads(text, object_hook=_untag)
