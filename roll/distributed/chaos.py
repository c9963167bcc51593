"""Fault injection for tests and soak runs: kill live worker processes of a run.

Workers are found by their Ray process title (``ray::<Class>`` when idle,
``ray::<Class>.<method>`` while a call runs) among the descendants of this process, so only
the local cluster this driver started is touched, never another run on the same machine.
A kill is SIGKILL, as a crash or the OOM killer would do it: Ray sees the actor die and the
run's fault handling (actor restarts, env-host replacement, group restarts) takes over.
"""
from __future__ import annotations

import os
import random
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Optional

import psutil

from roll.utils.logging import get_logger

logger = get_logger(__name__)

ROLE_CLASSES = {
    "env": "EnvironmentWorkerActor",
    "infer": "InferenceWorker",
    "reward": "RewardWorker",
    "train": "ActorWorker",
    "critic": "CriticWorker",
    "reference": "ReferenceWorker",
}
"""Fault targets by short name -> the worker class whose processes they are."""


def _title(proc: psutil.Process) -> str:
    try:
        cmd = proc.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return ""
    return cmd[0] if cmd else ""


def worker_processes(class_name: str, busy_with: Optional[str] = None, root: Optional[int] = None,
                     role: Optional[str] = None) -> list[psutil.Process]:
    """Live processes of Ray actors of ``class_name`` under ``root`` (default: this process);
    with ``busy_with``, only those running a method whose name starts with it; with ``role``,
    only workers of that role (clusters set ``ROLL_ROLE`` in their workers' environment)."""
    try:
        parent = psutil.Process(root or os.getpid())
        procs = parent.children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    out = []
    for p in procs:
        title = _title(p)
        if not title.startswith(f"ray::{class_name}"):
            continue
        rest = title[len(f"ray::{class_name}"):]
        if rest and not rest.startswith((".", " ")):
            continue  # another class whose name starts with this one
        if busy_with is not None and not rest.lstrip(".").startswith(busy_with):
            continue
        if role is not None:
            try:
                if p.environ().get("ROLL_ROLE") != role:
                    continue
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        out.append(p)
    return out


def kill_worker(class_name: str, rng: random.Random, busy_with: Optional[str] = None,
                wait_s: float = 0.0, root: Optional[int] = None, role: Optional[str] = None) -> Optional[int]:
    """SIGKILL one live worker process of ``class_name`` (one running ``busy_with`` if given,
    waiting up to ``wait_s`` for one); returns its pid, or None if none was found."""
    deadline = time.monotonic() + wait_s
    while True:
        procs = worker_processes(class_name, busy_with, root, role)
        if procs:
            victim = rng.choice(procs)
            try:
                os.kill(victim.pid, signal.SIGKILL)
            except ProcessLookupError:
                procs = []
            else:
                logger.warning("fault injection: killed %s pid %d (%s)", class_name, victim.pid, _title(victim))
                return victim.pid
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.05)


@dataclass
class FaultEvent:
    time_s: float
    target: str
    pid: Optional[int]


@dataclass
class ChaosMonkey:
    """A background thread that kills a random target's worker every ``interval_s`` seconds.

    ``targets`` are keys of ``ROLE_CLASSES`` (or class names). ``events`` records each attempt
    (pid None: no live process of that target at that moment)."""

    targets: list[str]
    interval_s: float = 20.0
    seed: int = 0
    start_after_s: float = 0.0
    events: list[FaultEvent] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="chaos-monkey", daemon=True)
        self._t0 = 0.0

    def start(self) -> "ChaosMonkey":
        self._t0 = time.monotonic()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def __enter__(self) -> "ChaosMonkey":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _loop(self) -> None:
        if self._stop.wait(self.start_after_s):
            return
        while not self._stop.wait(self.interval_s):
            target = self._rng.choice(self.targets)
            pid = kill_worker(ROLE_CLASSES.get(target, target), self._rng)
            self.events.append(FaultEvent(time.monotonic() - self._t0, target, pid))
