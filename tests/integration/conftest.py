"""Runs shared by integration tests that only read what a run wrote (each `roll run` costs
about a minute of start-up on a 2-core machine, more than its steps): one run per session,
started by the first test that asks for it. A test that changes a run's files works on a copy."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from roll.utils.checkpoint import COMPLETE_MARKER

from .helpers import CONSOLE_SMALL, RESUMABLE, run_cli, run_killed


@pytest.fixture(scope="session")
def verbose_resumable_run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """``RESUMABLE`` run to its end (3 steps, checkpoints step-1..3) with ``--verbose``: the
    uninterrupted reference of tests/integration/test_resume.py, the run
    tests/integration/test_checkpoint_safety.py damages (on copies) and the verbose console
    tests/integration/test_console_output.py reads."""
    out = tmp_path_factory.mktemp("resumable") / "run"
    proc = run_cli(RESUMABLE + [f"output_dir={out}", "--verbose"], timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out, proc


@pytest.fixture(scope="session")
def resumable_run(verbose_resumable_run) -> Path:
    return verbose_resumable_run[0]


@pytest.fixture(scope="session")
def driver_killed_run(tmp_path_factory) -> tuple[Path, list[str]]:
    """``RESUMABLE`` with only its driver SIGKILLed while checkpoint step-3 is being written (the
    workers' files in place, the driver's not), and the run's processes still alive a few seconds
    later: read by tests/integration/test_driver_kill.py; ``resumed_after_kill`` resumes a copy."""
    out = tmp_path_factory.mktemp("driver_killed") / "run"
    left = run_killed(RESUMABLE + [f"output_dir={out}"], "checkpoint:3")
    return out, left


@pytest.fixture(scope="session")
def resumed_after_kill(driver_killed_run, tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """A copy of ``driver_killed_run`` whose step-2 weights file is cut short (its COMPLETE
    marker kept), resumed: it falls back to step-1 and runs steps 2 and 3 again. One resume read
    by tests/integration/test_resume.py (same metrics as ``resumable_run``) and
    tests/integration/test_checkpoint_safety.py (the skipped checkpoint is named)."""
    out = tmp_path_factory.mktemp("resumed") / "run"
    shutil.copytree(driver_killed_run[0], out, symlinks=True)
    weights = out / "checkpoints" / "step-2" / "actor_train" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    assert (weights.parents[1] / COMPLETE_MARKER).exists()  # damaged, yet marked complete
    proc = run_cli(RESUMABLE + [f"output_dir={out}", "resume_from_checkpoint=true"], timeout=900)
    return out, proc


@pytest.fixture(scope="session")
def console_run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """A 2-step Sokoban run through the CLI with the default console and validation at steps 0
    and 2: read by tests/integration/test_console_output.py (what it printed) and
    tests/integration/test_agentic_pipeline.py (metrics, checkpoint, trajectories, final model)."""
    out = tmp_path_factory.mktemp("console") / "run"
    # the full sokoban_cpu settings ran 2 steps in 96 s on a 2-core machine; at a load average of
    # 50 to 70 these smaller runs took 6 to over 10 minutes
    proc = run_cli(["run", "configs/agentic/sokoban_cpu.yaml", *CONSOLE_SMALL, "eval_steps=2", f"output_dir={out}"],
                   timeout=900)
    return out, proc
