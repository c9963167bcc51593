"""CheckpointManager: atomic publish, rotation, and survival of a SIGKILL mid-write."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

from roll.utils.checkpoint import COMPLETE_MARKER, CheckpointManager


def _write_payload(value: str):
    def write(d):
        (d / "payload.txt").write_text(value)
    return write


def test_save_publishes_and_rotates(tmp_path):
    mgr = CheckpointManager(tmp_path, max_to_keep=2)
    for step in (1, 2, 3):
        mgr.save(step, _write_payload(f"s{step}"), {"tracker_step": step})
    steps = [s for s, _ in mgr.complete_checkpoints()]
    assert steps == [2, 3]
    latest = mgr.latest()
    assert latest.name == "step-3"
    assert (latest / "payload.txt").read_text() == "s3"
    state = CheckpointManager.read_state(latest)
    assert state["step"] == 3 and state["tracker_step"] == 3 and "torch" in state["rng"]


def test_partial_directory_is_ignored(tmp_path):
    mgr = CheckpointManager(tmp_path, max_to_keep=0)
    mgr.save(1, _write_payload("good"))
    # A half-written step-2 without its marker, as a crash in an older layout would leave.
    (tmp_path / "step-2").mkdir()
    (tmp_path / "step-2" / "payload.txt").write_text("half")
    (tmp_path / "latest").write_text("step-2")
    assert mgr.latest().name == "step-1"


def test_sigkill_during_write_keeps_previous_checkpoint(tmp_path):
    script = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        from roll.utils.checkpoint import CheckpointManager
        mgr = CheckpointManager({str(tmp_path)!r}, max_to_keep=3)
        def one(d):
            (d / "payload.txt").write_text("one")
        mgr.save(1, one)
        def slow(d):
            (d / "payload.txt").write_text("two-partial")
            print("WRITING", flush=True)
            time.sleep(60)
        mgr.save(2, slow)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.strip() == "WRITING"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    mgr = CheckpointManager(tmp_path, max_to_keep=3)
    latest = mgr.latest()
    assert latest is not None and latest.name == "step-1"
    assert (latest / COMPLETE_MARKER).exists()
    assert (latest / "payload.txt").read_text() == "one"
    # The next save cleans up the partial temporary directory.
    assert list(tmp_path.glob(".tmp-step-2-*"))
    mgr.save(2, _write_payload("two"))
    assert not list(tmp_path.glob(".tmp-step-*"))
    assert mgr.latest().name == "step-2"
