"""The tracker contract and the group that fans one call out to every configured backend.

A pipeline creates one tracker at start-up with :func:`create_tracker` and calls
``log(metrics, step)``, ``log_text(key, text, step)`` and ``finish()``. Every backend's
package is imported before any backend starts, so a missing package fails the run at
start-up (naming the extra to install), never in the middle of training.

``tracking.tracker_kwargs`` may hold one mapping per backend id
(``{wandb: {entity: team}, stdout: {max_text_chars: 0}}``); the remaining top-level keys go to
the hosted backends (wandb, swanlab), e.g. ``{entity: team, tags: [sokoban]}``.
"""
from __future__ import annotations

import importlib
import math
import numbers
from typing import Any, Mapping, Optional, Protocol, runtime_checkable

from roll.config.validate import ConfigError
from roll.registry import TRACKERS, RegistryError
from roll.utils.logging import get_logger

logger = get_logger(__name__)


@runtime_checkable
class Tracker(Protocol):
    """What a pipeline logs to. ``metrics`` keys are namespaced (``actor/loss``)."""

    def log(self, metrics: Mapping[str, float], step: int) -> None: ...

    def log_text(self, key: str, text: str, step: int) -> None: ...

    def finish(self) -> None: ...


def to_scalars(metrics: Mapping[str, Any]) -> tuple[dict[str, float], list[str]]:
    """Plain floats from numbers, 0-d / one-element tensors and numpy scalars.

    Returns the floats and the keys whose values are not scalars (dropped by the caller,
    which logs them), so one bad metric never stops the others from being recorded.
    """
    out: dict[str, float] = {}
    bad: list[str] = []
    for key, value in metrics.items():
        if hasattr(value, "numel") and hasattr(value, "item"):  # torch tensor
            if value.numel() != 1:
                bad.append(str(key))
                continue
            value = value.item()
        elif hasattr(value, "item") and getattr(value, "size", 2) == 1:  # numpy scalar / 1-element array
            value = value.item()
        if isinstance(value, numbers.Real):
            out[str(key)] = float(value)
        else:
            bad.append(str(key))
    return out, bad


def _require(name: str, cls: type) -> None:
    module, extra = getattr(cls, "requires", (None, None))
    if module is None:
        return
    try:
        importlib.import_module(module)
    except ImportError as e:
        install = f"pip install 'roll[{extra}]'" if extra else f"pip install {module}"
        raise ConfigError([
            f"tracking.track_with: tracker {name!r} needs the {module!r} package, which cannot be "
            f"imported ({e}); install it with: {install}"
        ]) from None


def _backend_kwargs(name: str, tracker_kwargs: Mapping[str, Any], hosted: bool) -> dict[str, Any]:
    own = tracker_kwargs.get(name)
    kwargs: dict[str, Any] = {}
    if hosted:
        kwargs.update({k: v for k, v in tracker_kwargs.items() if k not in TRACKERS})
    if isinstance(own, Mapping):
        kwargs.update(own)
    return kwargs


class TrackerGroup:
    """Fans calls out to several backends.

    A backend that raises while logging (a full disk, a network hiccup of a hosted service)
    is counted and reported in the log, and the other backends keep recording; training is
    not stopped by its bookkeeping. ``failures`` holds the count per backend.
    """

    def __init__(self, trackers: dict[str, Tracker]):
        self.trackers = trackers
        self.failures: dict[str, int] = {name: 0 for name in trackers}
        self.dropped_keys: set[str] = set()
        self._finished = False

    def _call(self, name: str, fn, *args) -> None:
        try:
            fn(*args)
        except Exception as e:  # counted and reported below; see the class docstring
            self.failures[name] += 1
            n = self.failures[name]
            if n == 1 or n % 100 == 0:
                logger.warning("tracker %r failed (%d times so far): %s: %s", name, n, type(e).__name__, e)

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        scalars, bad = to_scalars(metrics)
        new_bad = set(bad) - self.dropped_keys
        if new_bad:
            self.dropped_keys |= new_bad
            logger.warning("metrics that are not scalars were not logged: %s", ", ".join(sorted(new_bad)))
        if not scalars:
            return
        step = int(step)
        for name, tracker in self.trackers.items():
            self._call(name, tracker.log, scalars, step)

    def log_text(self, key: str, text: str, step: int) -> None:
        for name, tracker in self.trackers.items():
            self._call(name, tracker.log_text, str(key), str(text), int(step))

    def log_table(self, key: str, columns: list[str], rows: list[list[Any]], step: int) -> None:
        """A table to the backends that have ``log_table`` (wandb); the others skip it."""
        for name, tracker in self.trackers.items():
            fn = getattr(tracker, "log_table", None)
            if fn is not None:
                self._call(name, fn, str(key), list(columns), list(rows), int(step))

    def finish(self) -> None:
        if self._finished:
            return
        self._finished = True
        for name, tracker in self.trackers.items():
            self._call(name, tracker.finish)

    def __enter__(self) -> "TrackerGroup":
        return self

    def __exit__(self, *exc) -> None:
        self.finish()


def resolve_trackers(tracking_cfg) -> dict[str, type]:
    """The backend class of every name in ``tracking_cfg.track_with``, each one's package
    imported; an unknown name, a missing package or malformed ``tracker_kwargs`` is a
    ConfigError. Starts nothing and touches no file, so a pipeline calls it at start-up and
    creates the tracker only once a resume has restored its state."""
    classes: dict[str, type] = {}
    errors: list[str] = []
    for name in dict.fromkeys(tracking_cfg.track_with):
        try:
            classes[name] = TRACKERS.get(name)
        except RegistryError as e:
            errors.append(f"tracking.track_with: {e}")
    if errors:
        raise ConfigError(errors)
    for name, cls in classes.items():  # all imports first: nothing starts if one is missing
        _require(name, cls)
    tracker_kwargs = dict(tracking_cfg.tracker_kwargs or {})
    unknown = [k for k, v in tracker_kwargs.items() if k in TRACKERS and not isinstance(v, Mapping)]
    if unknown:
        raise ConfigError([f"tracking.tracker_kwargs.{k}: expected a mapping of {k} options" for k in unknown])
    return classes


def create_tracker(
    tracking_cfg,
    run_name: str,
    log_dir: str,
    config_dict: Optional[Mapping[str, Any]] = None,
    resume_step: Optional[int] = None,
) -> TrackerGroup:
    """One tracker for every backend in ``tracking_cfg.track_with`` (a TrackingConfig).

    ``log_dir`` is used unless ``tracking_cfg.log_dir`` is set. ``resume_step`` is the last
    step a resumed run had logged: file backends drop what the interrupted run logged after
    it, and hosted backends continue the same run.
    """
    classes = resolve_trackers(tracking_cfg)
    log_dir = tracking_cfg.log_dir or log_dir
    tracker_kwargs = dict(tracking_cfg.tracker_kwargs or {})
    started: dict[str, Tracker] = {}
    try:
        for name, cls in classes.items():
            started[name] = cls(
                run_name=run_name,
                log_dir=log_dir,
                config=dict(config_dict or {}),
                project=tracking_cfg.project,
                resume_step=resume_step,
                **_backend_kwargs(name, tracker_kwargs, getattr(cls, "hosted", False)),
            )
    except BaseException:
        for tracker in started.values():  # do not leave half a set of runs open
            tracker.finish()
        raise
    return TrackerGroup(started)


def finite_or_none(value: float) -> Optional[float]:
    """JSON has no NaN/inf: write them as null."""
    return value if math.isfinite(value) else None
