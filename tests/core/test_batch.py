"""The batch contract."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from rl_core.batch import Batch, BatchError


def make(n=4):
    return Batch(
        {"x": torch.arange(n * 2).view(n, 2), "m": torch.ones(n, 3)},
        {"uid": [f"u{i}" for i in range(n)], "extra": [{"i": i} for i in range(n)]},
        {"step": 1},
    )


def test_validation_rejects_disagreeing_rows():
    with pytest.raises(BatchError, match="x=3.*y=2"):
        Batch({"x": torch.zeros(3), "y": torch.zeros(2)})
    with pytest.raises(BatchError, match="uid=2"):
        Batch({"x": torch.zeros(3)}, {"uid": ["a", "b"]})
    with pytest.raises(BatchError, match="scalar"):
        Batch({"x": torch.tensor(1.0)})
    with pytest.raises(BatchError, match="torch.Tensor"):
        Batch({"x": [1, 2]})


def test_select_index_and_chunk():
    b = make(4)
    s = b.select("x", "uid")
    assert s.keys() == ["x", "uid"] and len(s) == 4
    assert s["x"].data_ptr() == b["x"].data_ptr()  # shared, not copied
    r = b.index([3, 1])
    assert r["x"].tolist() == [[6, 7], [2, 3]] and list(r["uid"]) == ["u3", "u1"]
    parts = b.chunk(2)
    assert [list(p["uid"]) for p in parts] == [["u0", "u1"], ["u2", "u3"]]
    with pytest.raises(BatchError, match="4 % 3 = 1"):
        b.chunk(3)
    with pytest.raises(KeyError, match="nope"):
        b.select("nope")


def test_concat_repeat_union():
    b = make(2)
    c = Batch.concat([b, b])
    assert len(c) == 4 and list(c["uid"]) == ["u0", "u1", "u0", "u1"]
    rep = b.repeat(3)
    assert list(rep["uid"]) == ["u0"] * 3 + ["u1"] * 3
    assert rep["x"][:, 0].tolist() == [0, 0, 0, 2, 2, 2]
    tiled = b.repeat(2, interleave=False)
    assert list(tiled["uid"]) == ["u0", "u1", "u0", "u1"]
    u = b.union(Batch({"y": torch.zeros(2)}, {"uid": ["u0", "u1"]}))
    assert set(u.keys()) == {"x", "m", "y", "uid", "extra"}
    with pytest.raises(BatchError, match="differs"):
        b.union(Batch({"x": torch.zeros(2, 2, dtype=torch.long)}))
    with pytest.raises(BatchError, match="fields"):
        Batch.concat([b, b.select("x")])


def test_pad_to_divisor_and_unpad():
    b = make(5)
    p, pad = b.pad_to_divisor(4)
    assert (len(p), pad, p.meta["pad"]) == (8, 3, 3)
    assert list(p["uid"][5:]) == ["u0", "u1", "u2"]
    back = p.unpad(pad)
    assert len(back) == 5 and torch.equal(back["x"], b["x"]) and "pad" not in back.meta
    same, zero = make(4).pad_to_divisor(2)
    assert zero == 0 and len(same) == 4


def test_setitem_checks_rows_and_pickles(tmp_path):
    import pickle

    b = make(3)
    b["adv"] = torch.zeros(3, 5)
    with pytest.raises(BatchError):
        b["bad"] = torch.zeros(2)
    with pytest.raises(BatchError):
        b["txt"] = ["a"]
    again = pickle.loads(pickle.dumps(b))
    assert torch.equal(again["adv"], b["adv"]) and list(again["uid"]) == list(b["uid"]) and again.meta == {"step": 1}
    assert isinstance(again.non_tensors["extra"], np.ndarray)
