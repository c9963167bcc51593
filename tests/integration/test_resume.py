"""Resume: a deterministic run whose driver was SIGKILLed while writing checkpoint step-3, and
whose step-2 checkpoint was then damaged, resumes from step-1 (the session's
``resumed_after_kill``) and reaches the same step 2 and 3 metrics as an uninterrupted run (the
session's ``resumable_run``; both in tests/integration/conftest.py). (A kill *during* the write
of a single file is covered by tests/test_checkpoint.py on the same CheckpointManager the
pipelines use.)"""
from __future__ import annotations

import pytest

from .helpers import read_metrics

pytestmark = pytest.mark.integration

COMPARED = ("actor/loss", "actor/grad_norm", "actor/entropy", "env/SimpleSokoban/return",
            "rollout/response_tokens/mean", "reward/score_mean")


def test_sigkill_after_checkpoint_then_resume_matches(resumable_run, resumed_after_kill):
    expected = read_metrics(resumable_run)  # the same arguments, uninterrupted
    out, proc = resumed_after_kill
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "resumed from" in proc.stdout and "step-1 at step 1" in proc.stdout  # the console line
    got = read_metrics(out)
    assert sorted(got) == [1, 2, 3]
    for step in (2, 3):
        for key in COMPARED:
            assert key in expected[step], (step, key, sorted(expected[step]))
            assert got[step][key] == pytest.approx(expected[step][key], rel=1e-5, abs=1e-6), (step, key)
    assert expected[3]["actor/grad_norm"] > 0  # the run really trained
