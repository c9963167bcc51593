"""SIGKILL of the driver (only the driver: its Ray cluster is left to itself) during rollout,
training and checkpoint writing: the latest good checkpoint is never damaged, resume works,
and no process of the run's local Ray cluster outlives the driver by more than a few seconds."""
from __future__ import annotations

import pytest

from roll.utils.checkpoint import CheckpointManager, verify_checkpoint

from .helpers import GRACE_S, read_metrics, run_cli, run_killed

pytestmark = pytest.mark.integration

# no validation, so no validation env workers: the run's own processes are still all watched
ARGS = ["run", "configs/agentic/sokoban_cpu.yaml", "save_steps=1", "eval_steps=0", "val_env_manager=null",
        "show_progress=false", "tracking.track_with=[jsonl]", "max_steps=2"]


def test_sigkill_while_writing_a_checkpoint_leaves_nothing_behind(driver_killed_run):
    """The session's 3-step run killed while writing step-3 (tests/integration/conftest.py;
    tests/integration/test_resume.py resumes a copy of it)."""
    out, left = driver_killed_run
    assert left == [], f"Ray processes outlived the driver by {GRACE_S}s: {left}"
    mgr = CheckpointManager(out / "checkpoints")
    # the half-written step-3 is not published; the checkpoints before it are intact
    assert [p.name for _, p in mgr.step_dirs()] == ["step-1", "step-2"]
    found = mgr.find_resumable()
    assert found is not None and found[0].name == "step-2", found
    assert [verify_checkpoint(out / "checkpoints" / f"step-{s}")["step"] for s in (1, 2)] == [1, 2]


@pytest.mark.slow
def test_sigkill_in_each_phase_then_resume(tmp_path):
    out = tmp_path / "run"
    good = None
    for where in ("rollout:2", "train:2", "checkpoint:2"):
        resume = ["resume_from_checkpoint=true"] if good is not None else []
        left = run_killed(ARGS + [f"output_dir={out}", *resume], where)
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
