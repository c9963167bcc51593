"""Checkpoints on the real CLI and tiny agentic pipeline: a truncated weights file with its
COMPLETE marker falls back to the previous checkpoint with a warning naming it; a crafted
checkpoint (the old pickle layout with a payload) is refused and its code never runs; a resume
whose max_steps is not above the checkpoint, or whose restore fails, changes nothing.

The fallback is the session's ``resumed_after_kill`` (also read by
tests/integration/test_resume.py); for the refusals, which happen before Ray starts, the
session's 3-step ``resumable_run`` is copied per test (both in tests/integration/conftest.py)."""
from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import pytest
import torch

from roll.utils.checkpoint import verify_checkpoint

from .helpers import RESUMABLE, read_metrics, run_cli

pytestmark = pytest.mark.integration

ARGS = [a for a in RESUMABLE if not a.startswith("max_steps=")]  # each test sets its own


class _Payload:
    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.fixture
def run_dir(resumable_run, tmp_path):
    """A copy of a finished 3-step run with checkpoints step-1, step-2 and step-3."""
    out = tmp_path / "run"
    shutil.copytree(resumable_run, out, symlinks=True)
    return out


def _files(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and "run.log" not in p.name}


def test_truncated_weights_fall_back_to_the_previous_checkpoint(resumed_after_kill):
    """The session's killed run with its step-2 weights cut short, resumed
    (tests/integration/conftest.py)."""
    out, proc = resumed_after_kill
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "checkpoint skipped" in proc.stderr and "step-2" in proc.stderr and "model.safetensors" in proc.stderr
    assert "resumed from" in proc.stdout and "step-1 at step 1" in proc.stdout  # a console line
    assert sorted(read_metrics(out)) == [1, 2, 3]
    for step in (2, 3):  # rewritten by the resumed run
        assert verify_checkpoint(out / "checkpoints" / f"step-{step}")["step"] == step


def test_crafted_pickle_checkpoint_is_refused_and_runs_nothing(run_dir, tmp_path):
    """The layout older versions wrote and read with pickle.load / torch.load(weights_only=False)."""
    marker = tmp_path / "PWNED"
    ckpt = run_dir / "checkpoints" / "step-3"
    (ckpt / "driver_rng.pkl").write_bytes(pickle.dumps(_Payload(str(marker))))
    torch.save({"step": 0, "evil": _Payload(str(marker))}, ckpt / "actor_train" / "trainer_state.pt")
    for name in ("MANIFEST.json", "driver_rng.json"):
        (ckpt / name).unlink(missing_ok=True)
    for older in ("step-1", "step-2"):  # the crafted checkpoint is the only one
        (run_dir / "checkpoints" / older).rename(run_dir / "checkpoints" / f"moved-away-{older}")
    before = _files(run_dir)
    proc = run_cli(ARGS + ["max_steps=4", f"output_dir={run_dir}", "resume_from_checkpoint=true"], timeout=900)
    assert not marker.exists(), "resuming ran code from the checkpoint"
    assert proc.returncode != 0
    assert "roll: no usable checkpoint" in proc.stderr and "pickle" in proc.stderr, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert _files(run_dir) == before


def test_max_steps_below_the_checkpoint_changes_nothing(run_dir):
    before = _files(run_dir)
    proc = run_cli(ARGS + ["max_steps=2", f"output_dir={run_dir}", "resume_from_checkpoint=true"], timeout=900)
    assert proc.returncode != 0
    assert "is at step 3 and max_steps=2 is not above it" in proc.stderr, proc.stderr[-3000:]
    assert _files(run_dir) == before  # step-1, step-2 not overwritten; latest, metrics, final_model, config unchanged


def test_failed_resume_from_an_older_checkpoint_keeps_the_metrics(run_dir):
    metrics = (run_dir / "logs" / "metrics.jsonl").read_text()
    weights = run_dir / "checkpoints" / "step-1" / "actor_train" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    proc = run_cli(ARGS + ["max_steps=4", f"output_dir={run_dir}",
                           f"resume_from_checkpoint={run_dir / 'checkpoints' / 'step-1'}"], timeout=900)
    assert proc.returncode != 0
    assert "step-1" in proc.stderr and "model.safetensors has 1000 bytes" in proc.stderr, proc.stderr[-3000:]
    assert (run_dir / "logs" / "metrics.jsonl").read_text() == metrics
    assert sorted(json.loads(line)["step"] for line in metrics.splitlines()) == [1, 2, 3]
