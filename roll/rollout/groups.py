"""EpisodeGroup: the bookkeeping of one group of episodes, as a pure state machine.

A group is ``size`` episode slots that share an env seed. Both scheduling modes of
roll/rollout/scheduler.py (lockstep and per-sample) hand every finished episode to
:meth:`EpisodeGroup.record` and act on its answer, so the two modes cannot drift apart: they
differ only in *when* episodes run, never in what an outcome means. No asyncio, no Ray here.

Transition table (``record(slot, trajectories)`` answers an ``EpisodeVerdict``; the slot's
verdict comes from :func:`roll.rollout.failures.classify_episode`):

=============================  ============================================  ===========
group state, episode outcome   effect on the group                           answer
=============================  ============================================  ===========
dropped or finished, any       none                                          IGNORED
open, cancelled                none                                          IGNORED
open, usable, slots left       slot filled                                   DONE
open, usable, last slot        slot filled; finished; the filter accepts it  READY
open, usable, last slot        slot filled; finished; the filter rejects it  FILTERED
open, stale / discarded        slot's attempt + 1                            RESTART
open, transient failure        slot's attempt + 1, its failures + 1          RETRY
open, failure past the budget  dropped                                       DROP
open, a failure that recurs    dropped                                       PERMANENT
=============================  ============================================  ===========

After RESTART and RETRY the caller reruns the slot (same env seed, the new attempt number
gives a new sampling seed); after DROP and PERMANENT the group is gone (the caller cancels
its running episodes, refills, or stops the run); READY groups are handed out.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from roll.data.trajectory import FAILURE_TYPES, Trajectory
from roll.rollout.failures import EpisodeVerdict, FailureSignature, classify_episode


@dataclass
class EpisodeGroup:
    """One group's slots, attempts and failures; see the module docstring for the transitions."""

    tag: str
    index: int
    env_seed: int
    size: int
    max_retries: int
    """Infrastructure failures a slot may have before the group is dropped."""
    accept: Callable[[list[Trajectory]], bool] | None = None
    """The group filter (None keeps every complete group)."""
    done: dict[int, list[Trajectory]] = field(default_factory=dict)
    running: dict[int, str] = field(default_factory=dict)
    """slot -> id of the episode running it (kept by the scheduler, to cancel it)."""
    attempts: dict[int, int] = field(default_factory=dict)
    """Per slot: the sampling-seed attempt number."""
    failures: dict[int, int] = field(default_factory=dict)
    """Per slot: infrastructure failures so far."""
    signatures: dict[int, FailureSignature] = field(default_factory=dict)
    """Per slot: its last failure (a repeat of it is permanent)."""
    dropped: bool = False
    finished: bool = False

    @property
    def group_id(self) -> str:
        return f"{self.tag}/{self.index}"

    @property
    def complete(self) -> bool:
        return len(self.done) == self.size

    def trajectories(self) -> list[Trajectory]:
        return [t for slot in sorted(self.done) for t in self.done[slot]]

    def min_version(self) -> int:
        return min((t.min_version for t in self.trajectories() if t.min_version >= 0), default=-1)

    def drop(self) -> None:
        """Settle the group as lost from outside (a permanent failure elsewhere, a shutdown)."""
        self.dropped = True

    def record(self, slot: int, trajs: Sequence[Trajectory]) -> str:
        """Record the outcome of the episode that ran ``slot``; returns the answer, an
        :class:`~roll.rollout.failures.EpisodeVerdict`."""
        if self.dropped or self.finished:
            return EpisodeVerdict.IGNORED
        failed = next((t for t in trajs if t.failure is not None), None)
        failure = failed.failure if failed is not None else None
        signature = previous = None
        if failure in FAILURE_TYPES:
            self.failures[slot] = self.failures.get(slot, 0) + 1
            signature = FailureSignature(failure, failed.failure_detail, failed.num_turns)
            previous = self.signatures.get(slot)
            self.signatures[slot] = signature
        verdict = classify_episode(failure, bool(failed is not None and failed.failure_permanent), signature,
                                   previous, self.failures.get(slot, 0), self.max_retries)
        if verdict == EpisodeVerdict.DONE:
            self.done[slot] = list(trajs)
            if not self.complete:
                return verdict
            self.finished = True
            keep = self.accept is None or self.accept(self.trajectories())
            return EpisodeVerdict.READY if keep else EpisodeVerdict.FILTERED
        if verdict in EpisodeVerdict.RERUN:
            self.attempts[slot] = self.attempts.get(slot, 0) + 1  # a new sampling seed
        elif verdict != EpisodeVerdict.IGNORED:
            self.dropped = True
        return verdict
