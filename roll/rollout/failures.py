"""Permanent vs transient failures of envs and rewards, the run's error log, and the per-step limit.

An error that will recur is *permanent* and stops the run (:class:`roll.errors.RunFailedError`)
with one message that names the env (or reward domain), the exception and the log file:

- the env could not be created (an unknown env id, a constructor that raised);
- the env broke its contract (an observation that is not text);
- the same exception (type and message) at the same turn came from the same env seed on two
  consecutive attempts of an episode slot: the retry reproduced it, so the next one would too.

Everything else (timeouts, dead workers, inference errors, an exception that did not repeat) is
*transient*: the episode is retried with the same env seed and counted. Each training step is
then checked against ``rollout.max_failed_share`` (:func:`check_step`).

Tracebacks (file and line of the env or reward code) go to a text log in the run directory
(``env_errors.log``, ``reward_errors.log``; :class:`ErrorLog`), written by the driver from the
traceback text the worker returns.
"""
from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from roll.errors import RunFailedError
from roll.utils.logging import get_logger

logger = get_logger(__name__)

ENV_ERRORS_LOG = "env_errors.log"
REWARD_ERRORS_LOG = "reward_errors.log"
_MAX_TRACEBACKS = 100  # distinct tracebacks kept in full; later ones get their one-line entry only


def one_line(text: str, limit: int = 300) -> str:
    """A message fit for a one-line summary (exception messages may hold newlines)."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


@dataclass(frozen=True)
class FailureSignature:
    """What makes two failures "the same error": kind, exception text and the turn it hit."""

    kind: str
    detail: str
    turn: int


class EpisodeVerdict:
    """What the scheduler does with one finished episode slot (:func:`classify_episode`), and
    with its group (``READY``/``FILTERED``, answered by roll/rollout/groups.py)."""

    DONE = "done"            # a usable episode: it fills its slot
    READY = "ready"          # ... the last one: the group passed the filter and is handed out
    FILTERED = "filtered"    # ... the last one: the filter rejected the group, which is refilled
    IGNORED = "ignored"      # cancelled (redundant or dropped group): nothing to do
    RESTART = "restart"      # stale / discarded: rerun, no retry budget used
    RETRY = "retry"          # a transient failure: rerun with the same env seed, budget used
    DROP = "drop"            # retries exhausted: the group is dropped and refilled
    PERMANENT = "permanent"  # will recur: the run stops

    RERUN = (RESTART, RETRY)
    LOST = (FILTERED, DROP, PERMANENT)


def classify_episode(failure: str | None, permanent: bool, signature: FailureSignature | None,
                     previous: FailureSignature | None, failures_so_far: int, max_retries: int) -> str:
    """A slot's verdict, asked by :meth:`EpisodeGroup.record`. ``failure``: the trajectory's failure
    type (None for a usable episode); ``permanent``: the worker's own verdict (creation error,
    contract violation); ``signature``: this failure's, ``previous``: the slot's last one (same env
    seed); ``failures_so_far``: the slot's infrastructure failures, this one included."""
    if failure is None:
        return EpisodeVerdict.DONE
    if failure == "cancelled":
        return EpisodeVerdict.IGNORED
    if failure in ("stale", "discarded"):
        return EpisodeVerdict.RESTART
    if permanent:
        return EpisodeVerdict.PERMANENT
    # only exceptions in env code are judged by repetition: a timeout, a dead worker or an
    # inference error says nothing about what the next attempt will do
    if failure == "env_error" and signature is not None and signature == previous:
        return EpisodeVerdict.PERMANENT
    return EpisodeVerdict.RETRY if failures_so_far <= max_retries else EpisodeVerdict.DROP


class ErrorLog:
    """Append-only failure log of one run (thread-safe; the file is created on first use).

    Each failure is one line (time, where, kind, message); the first failure with a given
    (kind, message) also gets its full traceback, up to ``_MAX_TRACEBACKS`` distinct ones.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._seen: Counter = Counter()
        self.lines = 0

    def record(self, where: str, kind: str, detail: str, traceback: str = "") -> None:
        key = (kind, detail)
        with self._lock:
            self._seen[key] += 1
            first = self._seen[key] == 1 and len(self._seen) <= _MAX_TRACEBACKS
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            text = f"{stamp} {where} {kind}: {one_line(detail, 2000)}\n"
            if first and traceback:
                text += "".join(f"    {line}\n" for line in traceback.rstrip().splitlines())
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                with open(self.path, "a", encoding="utf-8") as f:
                    f.write(text)
            except OSError as e:  # the log must never hide the failure it describes
                logger.error("cannot write %s (%s); failure was: %s", self.path, e, text)
                return
            self.lines += 1

    def __str__(self) -> str:
        return str(self.path)


def check_step(step: int, *, what: str, attempted: int, failed: int, trainable: int, limit: float,
               causes: Counter | None = None, log: ErrorLog | None = None, note: str = "") -> None:
    """Stop the run (RunFailedError) when a training step has no trainable sample, or when
    more than ``limit`` of its ``attempted`` episodes/responses (``what``) failed.

    ``causes`` counts the failures by "kind: message" for the summary; ``note`` says why
    samples were dropped other than by failures (e.g. filtered groups)."""
    share = failed / attempted if attempted else 0.0
    if trainable > 0 and share <= limit:
        return
    top = ", ".join(f"{n}x {one_line(c, 160)}" for c, n in (causes or Counter()).most_common(2))
    if trainable == 0:
        head = f"step {step + 1}: no trainable sample ({failed} of {attempted} {what} failed"
        head += f"; {note})" if note else ")"
    else:
        head = (f"step {step + 1}: {failed} of {attempted} {what} failed ({share:.0%}), more than "
                f"rollout.max_failed_share={limit:g}")
    msg = head + (f"; most common: {top}" if top else "")
    if log is not None and log.lines:
        msg += f"; failures and tracebacks in {log}"
    raise RunFailedError(msg)
