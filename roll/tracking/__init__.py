"""Metrics tracking: stdout, jsonl, tensorboard, wandb, swanlab (``tracking.track_with``).

Importing this package registers the builtin backends in ``roll.registry.TRACKERS`` (it is
that registry's autoload module); a backend's own package is imported only when a run uses it.
"""
from roll.tracking import backends as _backends  # noqa: F401  (registers the builtins)
from roll.tracking.base import Tracker, TrackerGroup, create_tracker, resolve_trackers, to_scalars

__all__ = ["Tracker", "TrackerGroup", "create_tracker", "resolve_trackers", "to_scalars"]
