"""Runs shared by integration tests that only read what a run wrote (each `roll run` costs
about a minute of start-up on a 2-core machine, more than its steps): one run per session,
started by the first test that asks for it. A test that changes a run's files works on a copy."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from .helpers import CONSOLE_SMALL, RESUMABLE, run_cli


@pytest.fixture(scope="session")
def resumable_run(tmp_path_factory) -> Path:
    """``RESUMABLE`` run to its end (3 steps, checkpoints step-1..3): the uninterrupted reference
    of tests/integration/test_resume.py and the run tests/integration/test_checkpoint_safety.py
    damages (on copies)."""
    out = tmp_path_factory.mktemp("resumable") / "run"
    proc = run_cli(RESUMABLE + [f"output_dir={out}"], timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out


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
