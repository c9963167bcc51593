"""Masked reductions, group indexing and the sample masks that keep samples out of the loss.

Shapes: ``B`` samples, ``T`` token positions aligned to ``input_ids`` (position ``t`` of a
log-prob, value or reward refers to token ``input_ids[:, t]``). ``response_mask`` [B, T] is 1
on model-produced tokens and 0 on prompt, environment-observation and padding tokens.

Every reduction over an empty selection returns 0 rather than NaN: an all-masked row or a
zero-length response must never poison a batch statistic.
"""
from __future__ import annotations

from typing import Any, Hashable, Optional

import numpy as np
import torch

GroupKeys = Any  # torch.Tensor [B] | np.ndarray [B] | Sequence[Hashable] of length B


# ---- masked reductions ---------------------------------------------------------------------
def masked_sum(x: torch.Tensor, mask: torch.Tensor, dim: Optional[int] = None) -> torch.Tensor:
    """Sum of ``x`` where ``mask`` is 1 (over ``dim``, or everything)."""
    m = mask.to(x.dtype)
    return (x * m).sum() if dim is None else (x * m).sum(dim)


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: Optional[int] = None) -> torch.Tensor:
    """Mean of ``x`` where ``mask`` is 1; 0 where nothing is selected (no NaN)."""
    m = mask.to(x.dtype)
    total = (x * m).sum() if dim is None else (x * m).sum(dim)
    count = m.sum() if dim is None else m.sum(dim)
    return total / count.clamp(min=1.0)


def masked_var(x: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance of the selected entries of ``x`` (scalar); 0 with fewer than two entries."""
    m = mask.to(x.dtype)
    count = m.sum()
    mean = masked_mean(x, mask)
    sq = ((x - mean) ** 2 * m).sum()
    denom = count - 1.0 if unbiased else count
    return torch.where(count > 1, sq / denom.clamp(min=1.0), torch.zeros_like(sq))


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True, eps: float = 1e-8) -> torch.Tensor:
    """``(x - mean) / sqrt(var + eps)`` over the selected entries (unbiased variance); entries
    outside ``mask`` are returned as 0. With ``shift_mean=False`` only the scale changes.

    When the std is at most 1e-6 the entries are all equal up to float noise: they are only
    centred, not scaled, so identical values give ~0 instead of noise times 1/sqrt(eps)."""
    mean = masked_mean(x, mask)
    var = masked_var(x, mask)
    out = (x - mean) if shift_mean else x
    out = out * torch.where(var > 1e-12, torch.rsqrt(var + eps), torch.ones_like(var))
    return out * mask.to(x.dtype)


# ---- groups --------------------------------------------------------------------------------
def group_index(keys: GroupKeys) -> tuple[torch.Tensor, int]:
    """Map per-sample group keys (ints, strings, tuples...) to dense ids 0..G-1.

    Returns ``(inverse [B] long, G)``; samples with equal keys get equal ids, numbered in
    order of first appearance so results do not depend on hashing.
    """
    if isinstance(keys, torch.Tensor):
        keys = keys.tolist()
    elif isinstance(keys, np.ndarray):
        keys = keys.tolist()
    ids: dict[Hashable, int] = {}
    inverse = [ids.setdefault(k, len(ids)) for k in keys]
    return torch.tensor(inverse, dtype=torch.long), len(ids)


def group_stats(values: torch.Tensor, inverse: torch.Tensor, n_groups: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-group ``(mean [G], unbiased std [G], count [G])`` of ``values`` [B].

    A group of one has std 0 (not NaN). Two passes (mean, then squared deviations) keep it
    exact for groups whose values are all equal.
    """
    inverse = inverse.to(values.device)
    count = torch.zeros(n_groups, dtype=values.dtype, device=values.device).index_add_(0, inverse, torch.ones_like(values))
    total = torch.zeros(n_groups, dtype=values.dtype, device=values.device).index_add_(0, inverse, values)
    mean = total / count.clamp(min=1.0)
    dev = (values - mean[inverse]) ** 2
    sq = torch.zeros(n_groups, dtype=values.dtype, device=values.device).index_add_(0, inverse, dev)
    std = torch.sqrt(sq / (count - 1.0).clamp(min=1.0))
    std = torch.where(count > 1, std, torch.zeros_like(std))
    return mean, std, count


# ---- turns ---------------------------------------------------------------------------------
def turn_ids_from_mask(response_mask: torch.Tensor) -> torch.Tensor:
    """[B, T] long: index of the turn each model token belongs to, -1 elsewhere.

    A turn is a maximal run of consecutive model tokens. Chat templates always put at least
    one non-model token (end-of-turn, the next observation) between two turns; where that is
    not so, pass explicit ``turn_ids`` instead.
    """
    m = response_mask.bool()
    prev = torch.zeros_like(m)
    prev[:, 1:] = m[:, :-1]
    starts = m & ~prev
    turn = torch.cumsum(starts.long(), dim=1) - 1
    return torch.where(m, turn, torch.full_like(turn, -1))


# ---- sample masks (which samples may enter the loss) ---------------------------------------
def per_sample_tensor(x: Any, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """A per-sample flag or score ([B] tensor, list, or a Batch's object array of bools) as a
    1-D tensor."""
    if isinstance(x, torch.Tensor):
        return x.to(dtype)
    return torch.tensor([float(v) for v in x], dtype=dtype)


def overlong_mask(truncated: torch.Tensor) -> torch.Tensor:
    """keep [B] bool: False for samples that hit the length or turn limit (DAPO's overlong
    filtering: a truncated answer is not evidence that the answer was bad)."""
    return ~per_sample_tensor(truncated).bool()


def difficulty_mask(
    group_ids: GroupKeys,
    success: torch.Tensor,
    low: Optional[float] = None,
    high: Optional[float] = None,
) -> torch.Tensor:
    """keep [B] bool: False for every sample of a group whose mean success is ``<= low`` (too
    hard) or ``>= high`` (too easy). ``success`` [B] is 0/1 or a score in [0, 1]."""
    inverse, n = group_index(group_ids)
    success = per_sample_tensor(success)
    mean, _, _ = group_stats(success, inverse, n)
    keep = torch.ones(n, dtype=torch.bool)
    if low is not None:
        keep &= mean > low
    if high is not None:
        keep &= mean < high
    return keep[inverse].to(success.device)


def build_sample_mask(
    cfg: Any,
    group_ids: Optional[GroupKeys] = None,
    success: Optional[torch.Tensor] = None,
    truncated: Optional[torch.Tensor] = None,
    failed: Optional[torch.Tensor] = None,
    batch_size: Optional[int] = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Combine the masks the :class:`AlgorithmConfig` ``cfg`` asks for into keep [B] bool.

    Per-sample inputs may be tensors or sequences (e.g. ``batch["success"]``).

    - ``failed`` [B] bool (infrastructure failure: env crash/timeout, dead worker) always
      masks, whatever the config: such a sample has no valid reward.
    - ``truncated`` [B] bool masks when ``cfg.mask_overlong``.
    - ``success`` [B] with ``group_ids`` masks whole groups by ``cfg.difficulty_mask_low`` /
      ``cfg.difficulty_mask_high``.

    Returns the mask and ``reward/masked_*`` counts for the tracker. Apply it with
    :func:`apply_sample_mask` before training, so the loss normalisers count kept tokens only.
    """
    sizes = [len(x) for x in (group_ids, success, truncated, failed) if x is not None]
    n = sizes[0] if sizes else batch_size
    if n is None:
        raise ValueError("build_sample_mask needs at least one per-sample input or batch_size")
    if any(s != n for s in sizes):
        raise ValueError(f"per-sample inputs disagree on batch size: {sizes}")
    keep = torch.ones(n, dtype=torch.bool)
    metrics: dict[str, float] = {}
    if failed is not None:
        f = per_sample_tensor(failed).bool()
        metrics["reward/masked_failed"] = float(f.sum())
        keep &= ~f
    if cfg.mask_overlong:
        if truncated is None:
            raise ValueError("algorithm.mask_overlong is set but no per-sample `truncated` flags were given")
        o = ~overlong_mask(truncated)
        metrics["reward/masked_overlong"] = float(o.sum())
        keep &= ~o
    if cfg.difficulty_mask_low is not None or cfg.difficulty_mask_high is not None:
        if success is None or group_ids is None:
            raise ValueError("difficulty masks need per-sample `success` and `group_ids`")
        d = ~difficulty_mask(group_ids, per_sample_tensor(success).cpu(), cfg.difficulty_mask_low, cfg.difficulty_mask_high)
        metrics["reward/masked_difficulty"] = float(d.sum())
        keep &= ~d
    metrics["reward/kept_fraction"] = float(keep.double().mean()) if n else 1.0
    return keep, metrics


def apply_sample_mask(response_mask: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Zero the loss mask of dropped samples: [B, T] * keep[B, None]."""
    return response_mask * keep.to(device=response_mask.device, dtype=response_mask.dtype)[:, None]

