"""Masked reductions and the sample masks (failure, overlong, difficulty)."""
from __future__ import annotations

import math
import statistics

import pytest
import torch

from algo_reference import random_batch
from roll.algorithms.masks import (
    apply_sample_mask,
    build_sample_mask,
    difficulty_mask,
    group_index,
    group_stats,
    masked_mean,
    masked_var,
    masked_whiten,
    turn_ids_from_mask,
)
from roll.config.algorithm import AlgorithmConfig


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_masked_reductions_match_reference(seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(5, 7, generator=g, dtype=torch.float64)
    m = (torch.rand(5, 7, generator=g) > 0.4).double()
    m[2] = 0  # an all-masked row
    sel = [float(x[i, t]) for i in range(5) for t in range(7) if m[i, t]]
    assert math.isclose(float(masked_mean(x, m)), statistics.mean(sel), rel_tol=1e-12)
    assert math.isclose(float(masked_var(x, m)), statistics.variance(sel), rel_tol=1e-12)
    rows = masked_mean(x, m, dim=-1)
    assert float(rows[2]) == 0.0  # empty row: 0, not NaN
    w = masked_whiten(x, m)
    mu, sd = statistics.mean(sel), math.sqrt(statistics.variance(sel) + 1e-8)
    for i in range(5):
        for t in range(7):
            expect = (float(x[i, t]) - mu) / sd if m[i, t] else 0.0
            assert math.isclose(float(w[i, t]), expect, rel_tol=1e-12, abs_tol=1e-14)


def test_empty_and_single_selection_are_finite():
    x = torch.randn(2, 3, dtype=torch.float64)
    empty = torch.zeros(2, 3)
    assert float(masked_mean(x, empty)) == 0 and float(masked_var(x, empty)) == 0
    assert (masked_whiten(x, empty) == 0).all()
    one = torch.zeros(2, 3)
    one[0, 1] = 1
    assert float(masked_var(x, one)) == 0 and torch.isfinite(masked_whiten(x, one)).all()


def test_group_index_and_stats():
    inv, n = group_index(["b", "a", "b", ("t", 1), "a"])
    assert n == 3 and inv.tolist() == [0, 1, 0, 2, 1]
    inv2, _ = group_index(torch.tensor([7, 3, 7]))
    assert inv2.tolist() == [0, 1, 0]
    mean, std, count = group_stats(torch.tensor([1.0, 2.0, 3.0, 5.0, 4.0], dtype=torch.float64), inv, n)
    assert mean.tolist() == [2.0, 3.0, 5.0] and count.tolist() == [2, 2, 1]
    assert math.isclose(float(std[0]), statistics.stdev([1.0, 3.0])) and float(std[2]) == 0.0


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_turn_ids_from_mask_recovers_turns(seed):
    rb = random_batch(seed)
    assert torch.equal(turn_ids_from_mask(rb.response_mask), rb.turn_ids)


def test_difficulty_mask():
    groups = ["a", "a", "b", "b", "c", "c", "d"]
    success = torch.tensor([1, 1, 0, 0, 1, 0, 1], dtype=torch.float64)
    keep = difficulty_mask(groups, success, low=0.0, high=1.0)
    assert keep.tolist() == [False, False, False, False, True, True, False]
    assert difficulty_mask(groups, success, low=None, high=None).all()


def test_build_sample_mask_combines_and_counts():
    cfg = AlgorithmConfig(mask_overlong=True, difficulty_mask_low=0.0, difficulty_mask_high=1.0)
    groups = [0, 0, 1, 1, 2, 2]
    success = torch.tensor([1, 0, 1, 1, 0, 1])
    truncated = torch.tensor([False, True, False, False, False, False])
    failed = torch.tensor([False, False, False, False, True, False])
    keep, metrics = build_sample_mask(cfg, groups, success, truncated, failed)
    # row 1 overlong; rows 2, 3 too easy; row 4 failed
    assert keep.tolist() == [True, False, False, False, False, True]
    assert metrics["reward/masked_failed"] == 1 and metrics["reward/masked_overlong"] == 1
    assert metrics["reward/masked_difficulty"] == 2
    mask = torch.ones(6, 4)
    masked = apply_sample_mask(mask, keep)
    assert masked.sum(-1).tolist() == [4, 0, 0, 0, 0, 4]
    # failures mask even when no option is set; missing inputs are explicit errors
    keep2, _ = build_sample_mask(AlgorithmConfig(), failed=failed)
    assert keep2.tolist() == [True, True, True, True, False, True]
    with pytest.raises(ValueError, match="truncated"):
        build_sample_mask(AlgorithmConfig(mask_overlong=True), groups, success)
    with pytest.raises(ValueError, match="success"):
        build_sample_mask(AlgorithmConfig(difficulty_mask_high=1.0), groups)
    with pytest.raises(ValueError, match="disagree"):
        build_sample_mask(cfg, groups, success[:3], truncated, failed)


def test_build_sample_mask_reads_batch_object_arrays():
    from roll.data.batch import Batch

    b = Batch(non_tensors={"group_id": ["a", "a", "b", "b"], "success": [True, True, True, False],
                           "truncated": [False, False, True, False]})
    cfg = AlgorithmConfig(mask_overlong=True, difficulty_mask_high=1.0)
    keep, _ = build_sample_mask(cfg, b["group_id"], success=b["success"], truncated=b["truncated"])
    assert keep.tolist() == [False, False, False, True]
