"""rl_data.entries: a generated item stored as JSON text comes back with its Python types (the contract between a
generator, e.g. rl-data's reasoning-gym rows, and the reward that scores them)."""

from __future__ import annotations

import datetime as dt

from hypothesis import given
from hypothesis import strategies as st
from rl_data.entries import decode_entry, encode_entry

_scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=5) | st.floats(allow_nan=False)
_keys = st.text(max_size=5) | st.integers() | st.tuples(st.integers(), st.integers())
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=3)
    | st.lists(inner, max_size=3).map(tuple)
    | st.frozensets(st.integers(), max_size=3)
    | st.sets(st.text(max_size=3), max_size=3)
    | st.dictionaries(_keys, inner, max_size=3),
    max_leaves=12,
)


@given(_values)
def test_entry_codec_round_trips_python_types(value):
    assert decode_entry(encode_entry(value)) == value


def test_entry_codec_keeps_types_and_refuses_unknown_objects():
    entry = {"grid": ((1, 2), (3, 4)), "when": dt.datetime(2024, 5, 1, 12, 30), "day": dt.date(2024, 5, 1),
             "at": dt.time(9, 15), "span": dt.timedelta(hours=2), "__tuple__": 1}
    back = decode_entry(encode_entry(entry))
    assert back == entry and isinstance(back["grid"][0], tuple)
    assert encode_entry({"x": object()}) is None
