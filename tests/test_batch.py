"""Batch: select/split/chunk/concat/union against plain per-row loops."""
from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from roll.data.batch import Batch


def make(n: int = 6, width: int = 4, offset: int = 0) -> Batch:
    ids = torch.arange(offset, offset + n * width).reshape(n, width)
    return Batch(
        tensors={"input_ids": ids, "reward": torch.arange(n, dtype=torch.float32) + offset, "feat": torch.randn(n, width, 2)},
        non_tensors={"tag": [f"env{(i + offset) % 2}" for i in range(n)], "meta": [{"seed": i + offset} for i in range(n)]},
        meta={"step": 3},
    )


def rows(batch: Batch) -> list[tuple]:
    """The batch as per-row tuples (the slow, obviously-correct view)."""
    return [
        (batch["input_ids"][i].tolist(), float(batch["reward"][i]), batch["feat"][i].tolist(), batch["tag"][i], batch["meta"][i])
        for i in range(len(batch))
    ]


def test_construction_and_access():
    b = make()
    assert len(b) == 6 and set(b.keys()) == {"input_ids", "reward", "feat", "tag", "meta"}
    assert isinstance(b.non_tensors["tag"], np.ndarray) and b.non_tensors["tag"].dtype == object
    assert "tag" in b and "nope" not in b
    assert b["meta"][2] == {"seed": 2}
    assert len(Batch()) == 0


def test_mismatched_sizes_are_rejected():
    with pytest.raises(ValueError, match="disagree on batch size"):
        Batch(tensors={"a": torch.zeros(3, 2)}, non_tensors={"b": [1, 2]})
    b = make(4)
    with pytest.raises(ValueError, match="disagree"):
        b["extra"] = torch.zeros(5)


def test_setitem_routes_by_type():
    b = make(3)
    b["mask"] = torch.ones(3, 4)
    b["text"] = ["a", "b", "c"]
    assert "mask" in b.tensors and "text" in b.non_tensors
    b["nested"] = [[1], [2, 3], []]  # ragged lists stay per-row objects
    assert b["nested"][1] == [2, 3]


def test_select_matches_row_loop():
    b = make()
    order = [4, 0, 0, 5]
    picked = b.select(order)
    assert rows(picked) == [rows(b)[i] for i in order]
    assert picked.meta == b.meta and picked.meta is not b.meta
    assert rows(b.select(torch.tensor([1, 2]))) == rows(b)[1:3]
    assert rows(b.select(np.array([3]))) == rows(b)[3:4]


def test_select_keys():
    b = make().select_keys(["input_ids", "tag"])
    assert set(b.keys()) == {"input_ids", "tag"} and len(b) == 6


def test_split_and_chunk():
    b = make(7)
    parts = b.split(3)
    assert [len(p) for p in parts] == [3, 3, 1]
    assert sum((rows(p) for p in parts), []) == rows(b)
    with pytest.raises(ValueError, match="positive"):
        b.split(0)
    with pytest.raises(ValueError, match="7 into 2"):
        b.chunk(2)
    chunks = make(6).chunk(3)
    assert [len(c) for c in chunks] == [2, 2, 2]


def test_concat_round_trip_and_padding():
    a, b = make(2, width=3), make(3, width=5, offset=100)
    joined = Batch.concat([a, b])
    assert len(joined) == 5 and joined["input_ids"].shape == (5, 5)
    # Narrower rows are right-padded with 0 to the widest.
    assert joined["input_ids"][0].tolist() == a["input_ids"][0].tolist() + [0, 0]
    assert joined["input_ids"][4].tolist() == b["input_ids"][2].tolist()
    assert joined["feat"].shape == (5, 5, 2)  # trailing feature dims are kept, dim 1 is padded
    assert torch.equal(joined["feat"][:2, :3], a["feat"]) and (joined["feat"][:2, 3:] == 0).all()
    assert list(joined["tag"]) == list(a["tag"]) + list(b["tag"])
    assert joined["reward"].tolist() == a["reward"].tolist() + b["reward"].tolist()
    assert joined.meta == a.meta
    same = make(6)
    assert rows(Batch.concat(same.split(4))) == rows(same)
    assert len(Batch.concat([])) == 0


def test_concat_rejects_different_fields():
    a = make(2)
    b = make(2).select_keys(["input_ids"])
    with pytest.raises(ValueError, match="different fields"):
        Batch.concat([a, b])


def test_union():
    a = make(3)
    extra = Batch(tensors={"adv": torch.ones(3), "reward": torch.zeros(3)}, non_tensors={"note": ["x", "y", "z"]}, meta={"version": 2})
    u = a.union(extra)
    assert set(u.keys()) == set(a.keys()) | {"adv", "note"}
    assert u["reward"].tolist() == [0.0, 0.0, 0.0]  # the other batch wins on clashes
    assert u.meta == {"step": 3, "version": 2}
    with pytest.raises(ValueError, match="size 3 and 2"):
        a.union(make(2))


def test_to_and_pickle():
    b = make(2)
    moved = b.to("cpu")
    assert torch.equal(moved["input_ids"], b["input_ids"]) and list(moved["tag"]) == list(b["tag"])
    again = pickle.loads(pickle.dumps(b))  # how batches cross Ray
    assert rows(again) == rows(b) and again.meta == b.meta
