"""Per-run resource control with a cgroup v2 of its own, where the machine delegates one.

A run's cgroup (a child of the configured or detected parent) gets ``memory.max`` (memory plus
the work-dir tmpfs, swap off), ``pids.max`` and ``cpu.max``; the launcher puts itself into it
before it starts bwrap, so every process of the run, memfd and tmpfs pages included, is counted
there. The parent reads ``cpu.stat`` (CPU time of the whole run, reaped or not) while the run
goes and ``memory.events`` afterwards, then removes the cgroup.

Where no cgroup v2 with the memory, pids and cpu controllers is writable (cgroup v1 hosts,
unprivileged containers), the sandbox falls back to rlimits and its init's CPU accounting
(docs/sandbox.md, "Resource control"); :func:`detect_parent` says which.
"""
from __future__ import annotations

import itertools
import os
import secrets
import threading

from roll.utils.logging import get_logger

logger = get_logger(__name__)

CONTROLLERS = ("memory", "pids", "cpu")
_COUNTER = itertools.count()


def cgroup2_mount(mountinfo: str = "/proc/self/mountinfo") -> str | None:
    """Where the cgroup v2 hierarchy is mounted (None when it is not)."""
    try:
        with open(mountinfo) as f:
            for line in f:
                left, _, right = line.partition(" - ")
                if right.split()[:1] == ["cgroup2"]:
                    return left.split()[4]
    except OSError:
        return None
    return None


def own_cgroup(proc_cgroup: str = "/proc/self/cgroup") -> str | None:
    """This process's cgroup v2 path (the ``0::`` line), relative to the hierarchy's root."""
    try:
        with open(proc_cgroup) as f:
            for line in f:
                if line.startswith("0::"):
                    return line[3:].strip()
    except OSError:
        return None
    return None


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def usable_parent(path: str) -> str | None:
    """Why ``path`` cannot hold run cgroups, or None when it can: the controllers are enabled
    for its children (or can be), and it is writable."""
    if not os.path.isfile(os.path.join(path, "cgroup.subtree_control")):
        return f"{path} is not a cgroup v2 directory"
    try:
        available = set(_read(os.path.join(path, "cgroup.controllers")).split())
        enabled = set(_read(os.path.join(path, "cgroup.subtree_control")).split())
    except OSError as e:
        return f"{path}: {e}"
    missing = [c for c in CONTROLLERS if c not in available]
    if missing:
        return f"{path} does not have the {', '.join(missing)} controller(s) (delegated: {sorted(available) or 'none'})"
    if not os.access(path, os.W_OK):
        return f"{path} is not writable"
    need = [c for c in CONTROLLERS if c not in enabled]
    if need:
        try:  # fails while the cgroup holds processes (cgroup v2's no-internal-process rule)
            _write(os.path.join(path, "cgroup.subtree_control"), " ".join("+" + c for c in need))
        except OSError as e:
            return f"cannot enable {', '.join(need)} for the children of {path}: {e.strerror}"
    return None


_DETECT_LOCK = threading.Lock()
_DETECTED: dict[str, tuple[str | None, str]] = {}


def detect_parent(configured: str) -> tuple[str | None, str]:
    """(parent directory for run cgroups or None, why not). ``configured``: "off", "auto"
    (this process's own cgroup, which works where it may enable controllers for its children)
    or a path (absolute, or relative to the cgroup v2 mount). Cached per process."""
    with _DETECT_LOCK:
        if configured in _DETECTED:
            return _DETECTED[configured]
        if configured == "off":
            answer: tuple[str | None, str] = (None, "cgroup resource control is off (sandbox cgroup: off)")
        else:
            mount = cgroup2_mount()
            if mount is None:
                answer = (None, "no cgroup v2 hierarchy is mounted")
            else:
                if configured == "auto":
                    own = own_cgroup()
                    path = os.path.join(mount, (own or "/").lstrip("/")) if own is not None else None
                else:
                    path = configured if configured.startswith("/") else os.path.join(mount, configured)
                why = "this process is in no cgroup v2" if path is None else usable_parent(path)
                answer = (path, "") if why is None else (None, why)
        _DETECTED[configured] = answer
        if answer[0] is None:
            logger.info("sandbox resource control: rlimits (%s)", answer[1])
        return answer


class RunCgroup:
    """One run's cgroup: created with its limits, removed by :meth:`remove`."""

    def __init__(self, parent: str, memory_bytes: int, pids: int, cpu_cores: float):
        self.path = os.path.join(parent, f"roll-run-{os.getpid()}-{next(_COUNTER)}-{secrets.token_hex(3)}")
        os.mkdir(self.path)
        try:
            _write(os.path.join(self.path, "memory.max"), str(memory_bytes))
            if os.path.exists(os.path.join(self.path, "memory.swap.max")):
                _write(os.path.join(self.path, "memory.swap.max"), "0")
            _write(os.path.join(self.path, "pids.max"), str(pids))
            period = 100_000
            _write(os.path.join(self.path, "cpu.max"), f"{max(1000, int(cpu_cores * period))} {period}")
        except OSError:
            self.remove()
            raise
        self.procs = os.path.join(self.path, "cgroup.procs")

    def cpu_s(self) -> float:
        """CPU time of every process the run ever had, from cpu.stat."""
        try:
            for line in _read(os.path.join(self.path, "cpu.stat")).splitlines():
                key, _, value = line.partition(" ")
                if key == "usage_usec":
                    return int(value) / 1e6
        except (OSError, ValueError):
            pass
        return 0.0

    def oom_killed(self) -> bool:
        try:
            for line in _read(os.path.join(self.path, "memory.events")).splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill" and int(value) > 0:
                    return True
        except (OSError, ValueError):
            pass
        return False

    def remove(self) -> None:
        """Kill whatever is left in it and remove it (a run's cgroup must not outlive the run)."""
        for _ in range(50):
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:
                try:
                    _write(os.path.join(self.path, "cgroup.kill"), "1")
                except OSError:
                    pass
                threading.Event().wait(0.02)
        logger.warning("could not remove the sandbox cgroup %s", self.path)
