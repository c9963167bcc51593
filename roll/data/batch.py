"""Batch: per-sample tensors with a shared first dimension, plus non-tensor fields and meta info.

Why not `tensordict`: our batches are small dicts of [B, T] tensors plus ragged per-sample
Python objects (trajectory metadata, env tags, text); a plain container with explicit
concat/split/select is a few dozen lines, pickles cheaply across Ray, and carries no version
coupling to torch releases. Packing and padding helpers live in `roll.data.packing`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np
import torch


@dataclass
class Batch:
    """``tensors[k]`` are [B, ...] tensors; ``non_tensors[k]`` are length-B object arrays;
    ``meta`` is batch-level information (step, policy version, metrics) that is not split."""

    tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    non_tensors: dict[str, np.ndarray] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for k, v in list(self.non_tensors.items()):
            if not isinstance(v, np.ndarray):
                arr = np.empty(len(v), dtype=object)
                arr[:] = list(v)
                self.non_tensors[k] = arr
        self.check()

    # ---- shape -------------------------------------------------------------------------
    def check(self) -> None:
        sizes = {k: v.shape[0] for k, v in self.tensors.items()}
        sizes.update({k: len(v) for k, v in self.non_tensors.items()})
        if len(set(sizes.values())) > 1:
            raise ValueError(f"batch fields disagree on batch size: {sizes}")

    def __len__(self) -> int:
        for v in self.tensors.values():
            return int(v.shape[0])
        for v in self.non_tensors.values():
            return len(v)
        return 0

    def __contains__(self, key: str) -> bool:
        return key in self.tensors or key in self.non_tensors

    def __getitem__(self, key: str) -> Any:
        if key in self.tensors:
            return self.tensors[key]
        return self.non_tensors[key]

    def __setitem__(self, key: str, value: Any) -> None:
        if isinstance(value, torch.Tensor):
            self.tensors[key] = value
        else:
            arr = value if isinstance(value, np.ndarray) else _object_array(value)
            self.non_tensors[key] = arr
        self.check()

    def keys(self) -> list[str]:
        return [*self.tensors, *self.non_tensors]

    # ---- selection -------------------------------------------------------------------
    def select(self, indices: Sequence[int] | torch.Tensor | np.ndarray) -> "Batch":
        """Rows ``indices`` (in that order)."""
        idx = torch.as_tensor(np.asarray(indices, dtype=np.int64))
        np_idx = idx.numpy()
        return Batch(
            {k: v[idx] for k, v in self.tensors.items()},
            {k: v[np_idx] for k, v in self.non_tensors.items()},
            dict(self.meta),
        )

    def select_keys(self, keys: Iterable[str]) -> "Batch":
        keys = set(keys)
        return Batch(
            {k: v for k, v in self.tensors.items() if k in keys},
            {k: v for k, v in self.non_tensors.items() if k in keys},
            dict(self.meta),
        )

    def split(self, size: int) -> list["Batch"]:
        """Consecutive chunks of ``size`` rows (the last may be shorter)."""
        if size <= 0:
            raise ValueError(f"split size must be positive, got {size}")
        n = len(self)
        return [self.select(range(i, min(i + size, n))) for i in range(0, n, size)]

    def chunk(self, n_chunks: int) -> list["Batch"]:
        """``n_chunks`` equal parts; the batch size must divide evenly (data-parallel dispatch)."""
        n = len(self)
        if n_chunks <= 0 or n % n_chunks:
            raise ValueError(f"cannot split a batch of {n} into {n_chunks} equal parts")
        return self.split(n // n_chunks)

    @staticmethod
    def concat(batches: Sequence["Batch"]) -> "Batch":
        """Row-wise concatenation; tensors of different trailing length are right-padded
        (with 0) to the longest. Meta of the first batch is kept."""
        batches = [b for b in batches if b is not None]
        if not batches:
            return Batch()
        keys_t = set(batches[0].tensors)
        keys_n = set(batches[0].non_tensors)
        for b in batches[1:]:
            if set(b.tensors) != keys_t or set(b.non_tensors) != keys_n:
                raise ValueError("cannot concat batches with different fields")
        tensors = {}
        for k in batches[0].tensors:
            parts = [b.tensors[k] for b in batches]
            if parts[0].dim() >= 2 and len({p.shape[1:] for p in parts}) > 1:
                width = max(p.shape[1] for p in parts)
                # Pad dim 1 (F.pad lists dims last-first, so trailing dims get (0, 0) each).
                parts = [torch.nn.functional.pad(p, (0, 0) * (p.dim() - 2) + (0, width - p.shape[1])) for p in parts]
            tensors[k] = torch.cat(parts, dim=0)
        non_tensors = {k: np.concatenate([b.non_tensors[k] for b in batches]) for k in batches[0].non_tensors}
        return Batch(tensors, non_tensors, dict(batches[0].meta))

    def union(self, other: "Batch") -> "Batch":
        """Add ``other``'s fields (same batch size); ``other`` wins on clashes."""
        if len(self) and len(other) and len(self) != len(other):
            raise ValueError(f"union of batches of size {len(self)} and {len(other)}")
        return Batch({**self.tensors, **other.tensors}, {**self.non_tensors, **other.non_tensors}, {**self.meta, **other.meta})

    def pad_rows_to_multiple(self, multiple: int, zero_keys: Iterable[str] = ("response_mask",)) -> tuple["Batch", int]:
        """Append copies of the last row until ``len`` is a multiple of ``multiple``, with
        ``zero_keys`` zeroed in the copies (so they add nothing to a masked loss or its
        normalisers). Lets uneven batches split evenly over data-parallel ranks and
        micro-batches. Returns the padded batch and the number of rows added."""
        n = len(self)
        pad = (-n) % max(1, multiple)
        if pad == 0 or n == 0:
            return self, 0
        out = self.select(list(range(n)) + [n - 1] * pad)
        for k in zero_keys:
            if k in out.tensors:
                out.tensors[k][n:] = 0
        return out, pad

    def to(self, device: str | torch.device) -> "Batch":
        return Batch({k: v.to(device) for k, v in self.tensors.items()}, dict(self.non_tensors), dict(self.meta))


def _object_array(values: Iterable[Any]) -> np.ndarray:
    values = list(values)
    arr = np.empty(len(values), dtype=object)
    arr[:] = values
    return arr
