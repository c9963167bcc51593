"""roll/utils/reaper.py: the processes a driver started die with it, even on SIGKILL, and a
process that merely reuses a recorded pid is left alone."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil

from roll.utils.reaper import _kill


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.1)
    return False


def test_children_die_with_a_sigkilled_driver():
    # The "driver" starts a grandchild in its own session (as Ray's agents end up: not in the
    # driver's process group, reparented when their parent dies) and then the reaper.
    script = textwrap.dedent(
        """
        import subprocess, sys, time
        from roll.utils.reaper import start_reaper
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
        start_reaper()
        print(child.pid, flush=True)
        time.sleep(120)
        """
    )
    driver = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    child = int(driver.stdout.readline())
    time.sleep(2.5)  # the reaper records the driver's descendants every second
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait(timeout=10)
    try:
        assert _wait_gone(child, 5.0), "the driver's child outlived it by 5 s"
    finally:
        try:
            os.kill(child, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_a_reused_pid_is_not_killed():
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        created = psutil.Process(sleeper.pid).create_time()
        assert _kill({sleeper.pid: created - 100.0}) == 0  # recorded start time differs: another process
        assert sleeper.poll() is None
        assert _kill({sleeper.pid: created}) == 1
        assert sleeper.wait(timeout=10) == -signal.SIGKILL
    finally:
        sleeper.kill()
