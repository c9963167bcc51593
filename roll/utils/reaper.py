"""Ends the processes of a local Ray cluster when the driver that started it dies.

When a driver is SIGKILLed, Ray's GCS, raylet and workers exit within about a second, but its
dashboard and runtime-env agents notice the raylet's death and then block for a minute
publishing an error to the GCS that is already gone (Ray's hard-coded 60 s timeout), so they
outlive the run. The driver starts this reaper next to its local cluster: a small process in
its own session that keeps the read end of a pipe whose write end only the driver holds, and
that records the driver's descendants every ``INTERVAL_S``. When the pipe reaches EOF (the
driver exited, however it died), it SIGKILLs every recorded process still alive, checking each
one's start time so that a recycled pid is never touched, and exits.

Usage (in the driver, after ``ray.init`` started a local cluster): :func:`start_reaper`.
"""
from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from typing import Optional

INTERVAL_S = 1.0
_reaper: Optional[subprocess.Popen] = None


def start_reaper() -> Optional[subprocess.Popen]:
    """Start the reaper for this process's descendants (once per process)."""
    global _reaper
    if _reaper is not None and _reaper.poll() is None:
        return _reaper
    # The pipe's write end stays open in this process only (close_fds keeps it from the
    # reaper; Ray's own children do not inherit it either, it is not inheritable).
    _reaper = subprocess.Popen([sys.executable, "-m", "roll.utils.reaper", str(os.getpid())],
                               stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, close_fds=True,
                               start_new_session=True)
    return _reaper


def _descendants(pid: int, known: dict[int, float]) -> None:
    import psutil

    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return
    for child in children:
        try:
            known.setdefault(child.pid, child.create_time())
        except psutil.Error:
            pass


def _kill(known: dict[int, float]) -> int:
    import psutil

    killed = 0
    for pid, created in known.items():
        try:
            proc = psutil.Process(pid)
            if abs(proc.create_time() - created) > 1e-3:
                continue  # the pid now belongs to another process
            proc.send_signal(signal.SIGKILL)
            killed += 1
        except psutil.Error:
            pass
    return killed


def main(driver_pid: int) -> None:
    known: dict[int, float] = {}
    me = os.getpid()
    fd = sys.stdin.fileno()
    while True:
        _descendants(driver_pid, known)
        known.pop(me, None)
        ready, _, _ = select.select([fd], [], [], INTERVAL_S)
        if ready and not os.read(fd, 4096):  # EOF: the driver is gone
            break
    _kill(known)


if __name__ == "__main__":
    main(int(sys.argv[1]))
