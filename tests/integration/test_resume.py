"""Resume: a deterministic run SIGKILLed after its step-1 checkpoint and resumed reaches the
same step 2 and 3 metrics as an uninterrupted run (the session's ``resumable_run``, see
tests/integration/conftest.py). (A kill *during* a checkpoint write is covered by
tests/test_checkpoint.py on the same CheckpointManager the pipelines use.)"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from roll.utils.checkpoint import COMPLETE_MARKER

from .helpers import REPO, RESUMABLE as ARGS, cli_env, read_metrics, run_cli

pytestmark = pytest.mark.integration

COMPARED = ("actor/loss", "actor/grad_norm", "actor/entropy", "env/SimpleSokoban/return",
            "rollout/response_tokens/mean", "reward/score_mean")


def test_sigkill_after_checkpoint_then_resume_matches(tmp_path, resumable_run):
    expected = read_metrics(resumable_run)  # the same ARGS, uninterrupted

    out = tmp_path / "killed"
    killed = subprocess.Popen([sys.executable, "-m", "roll", *ARGS, f"output_dir={out}"], cwd=REPO, env=cli_env(),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    marker = out / "checkpoints" / "step-1" / COMPLETE_MARKER
    deadline = time.monotonic() + 600
    try:
        while not marker.exists():
            assert killed.poll() is None, "run ended before its first checkpoint"
            assert time.monotonic() < deadline, "no step-1 checkpoint within 10 minutes"
            time.sleep(0.2)
    finally:
        os.killpg(killed.pid, signal.SIGKILL)
        killed.wait(timeout=60)
    assert killed.returncode == -signal.SIGKILL

    proc = run_cli(ARGS + [f"output_dir={out}", "resume_from_checkpoint=true"], timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "resumed from" in proc.stdout  # the console line (the log record goes to run.log)
    got = read_metrics(out)
    for step in (2, 3):
        for key in COMPARED:
            assert key in expected[step], (step, key, sorted(expected[step]))
            assert got[step][key] == pytest.approx(expected[step][key], rel=1e-5, abs=1e-6), (step, key)
    assert expected[3]["actor/grad_norm"] > 0  # the run really trained
