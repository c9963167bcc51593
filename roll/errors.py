"""Expected failures: errors whose message is meant for the user.

The CLI prints a ``RollError`` as one line (or a short block) and exits with its
``exit_code``; the traceback goes to the run's log file (console only with ``--verbose``).
Anything else that escapes a run is an unexpected crash and is printed with its traceback.

The existing error types of the config, registry, data and cluster modules derive from
``RollError`` so a caller can catch every expected failure with one ``except``.
"""
from __future__ import annotations


class RollError(Exception):
    """An expected failure with a message meant for the user."""

    exit_code = 1


class RunFailedError(RollError):
    """The run cannot make progress: a permanent env/reward failure, or a step with no
    trainable sample. The message names the cause; the first traceback is in the run log."""


class CheckpointError(RollError):
    """A checkpoint that cannot be written, read or verified (the message names it)."""


def unwrap(exc: BaseException) -> BaseException:
    """The expected error inside a Ray task error chain, or ``exc`` itself.

    Ray re-raises an actor's exception as ``RayTaskError`` wrapping the original as
    ``cause``; a ``RollError`` raised in a worker is still an expected failure.
    """
    seen = 0
    cur: BaseException | None = exc
    while cur is not None and seen < 8:
        if isinstance(cur, RollError):
            return cur
        cur = getattr(cur, "cause", None) or cur.__cause__
        seen += 1
    return exc


class WorkerUnavailableError(RuntimeError):
    """A worker that cannot serve right now but will (restarted by Ray and not yet set up, or
    waiting for the current weights). Transient: callers retry or route elsewhere; never a
    user-facing failure."""
