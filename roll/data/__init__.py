"""Data containers: Batch (tensors + per-sample fields) and packing/padding helpers."""
from roll.data.batch import Batch

__all__ = ["Batch"]
