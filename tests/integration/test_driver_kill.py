"""SIGKILL of the driver (only the driver: its Ray cluster is left to itself) during rollout,
training and checkpoint writing: the latest good checkpoint is never damaged, resume works,
and no process of the run's local Ray cluster outlives the driver by more than a few seconds."""
from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from roll.utils.checkpoint import CheckpointManager, verify_checkpoint

from .helpers import REPO, cli_env, read_metrics, run_cli

pytestmark = pytest.mark.integration

# no validation, so no validation env workers: the run's own processes are still all watched
ARGS = ["run", "configs/agentic/sokoban_cpu.yaml", "save_steps=1", "eval_steps=0", "val_env_manager=null",
        "show_progress=false", "tracking.track_with=[jsonl]", "max_steps=2"]
KILLER = Path(__file__).with_name("kill_driver.py")
GRACE_S = 5.0


def _run_killed(out: Path, where: str, resume: bool) -> list[str]:
    """Run until the driver SIGKILLs itself at ``where``; return the names of the run's
    processes still alive ``GRACE_S`` seconds later."""
    env = {**cli_env(), "ROLL_TEST_KILL": where}
    args = ARGS + [f"output_dir={out}"] + (["resume_from_checkpoint=true"] if resume else [])
    proc = subprocess.Popen([sys.executable, str(KILLER), *args], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    seen: dict[int, psutil.Process] = {}
    names: set[str] = set()
    driver = psutil.Process(proc.pid)
    deadline = time.monotonic() + 900
    while proc.poll() is None:  # record the run's processes while the driver lives
        try:
            for child in driver.children(recursive=True):
                seen.setdefault(child.pid, child)
                names.add(_name(child))  # each time: a new process is "python" until it execs
        except psutil.NoSuchProcess:
            break
        assert time.monotonic() < deadline, "the run did not reach the kill point"
        time.sleep(0.2)
    stderr = proc.stderr.read()
    assert proc.returncode == -signal.SIGKILL, (where, proc.returncode, stderr[-3000:])
    assert {"raylet", "gcs_server"} <= names, (where, names)  # the run's own local cluster was watched
    time.sleep(GRACE_S)
    left = [p for p in seen.values() if _alive(p)]
    for p in left:  # do not leak them into the next test
        p.kill()
    return [f"{p.pid}:{_name(p)}" for p in left]


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _name(p: psutil.Process) -> str:
    try:
        return p.name()
    except psutil.Error:
        return "?"


def test_sigkill_while_writing_a_checkpoint_leaves_nothing_behind(tmp_path):
    out = tmp_path / "run"
    left = _run_killed(out, "checkpoint:1", resume=False)
    assert left == [], f"Ray processes outlived the driver by {GRACE_S}s: {left}"
    mgr = CheckpointManager(out / "checkpoints")
    assert mgr.step_dirs() == [] and mgr.find_resumable() is None  # the half-written step-1 is not published


@pytest.mark.slow
def test_sigkill_in_each_phase_then_resume(tmp_path):
    out = tmp_path / "run"
    good = None
    for where in ("rollout:2", "train:2", "checkpoint:2"):
        left = _run_killed(out, where, resume=good is not None)
        assert left == [], (where, left)
        found = CheckpointManager(out / "checkpoints").find_resumable()
        assert found is not None and found[0].name == "step-1", (where, found)
        good = found[0]
        verify_checkpoint(good)  # every file matches the manifest written before the kill
    proc = run_cli(ARGS + [f"output_dir={out}", "resume_from_checkpoint=true"], timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "resumed from" in proc.stdout and "step-1 at step 1" in proc.stdout  # a console line
    assert sorted(read_metrics(out)) == [1, 2]
    assert verify_checkpoint(out / "checkpoints" / "step-2")["step"] == 2
