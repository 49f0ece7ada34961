"""A pickle payload that writes a marker file when it is unpickled (to prove a loader never runs it)."""

from __future__ import annotations

import pickle


class WritesMarker:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        # unpickling calls open(marker, "w"): the file appears iff the pickle ran
        return (open, (self.marker, "w"))


def payload(marker: str) -> bytes:
    return pickle.dumps({"step": 2, "data": WritesMarker(marker)})
