"""Sample trajectories reach wandb as a Table (WANDB_MODE=offline: the run is written locally)."""
from __future__ import annotations

import json
import os

import pytest

from roll.config.schema import TrackingConfig
from roll.tracking import create_tracker
from roll.viewer import records as R

wandb = pytest.importorskip("wandb", reason="wandb is not installed (pip install 'roll[wandb]')")


def test_trajectories_are_logged_as_a_wandb_table(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    recs = [R.record("agentic", 3, id=f"Sok/0/{k}", env_tag="Sok", group_id="Sok/0", success=k == 0,
                     **{"return": 1.0 - k}, advantage=0.5 - k, num_turns=1,
                     turns=[R.turn("#P_O#", "<answer>Left</answer>", -0.1, 0)]) for k in range(2)]
    recs.append(R.record("rlvr", 3, id="math-0", env_tag="math", group_id="g", turns=[R.turn("2+2?", "4")]))
    tracker = create_tracker(TrackingConfig(track_with=["jsonl", "wandb"]), run_name="t", log_dir=str(tmp_path))
    R.log_records(tracker, recs, step=3)
    tracker.finish()
    assert tracker.failures == {"jsonl": 0, "wandb": 0}
    tables = [os.path.join(d, f) for d, _, fs in os.walk(tmp_path / "wandb") for f in fs if f.endswith(".table.json")]
    assert len(tables) == 1, tables
    with open(tables[0]) as f:
        table = json.load(f)
    assert table["columns"] == R.TABLE_COLUMNS
    assert [row[4] for row in table["data"]] == ["Sok/0/0", "Sok/0/1", "math-0"]
    assert "<answer>Left</answer>" in table["data"][0][-1] and table["data"][1][7] == -0.5
    # the text trackers still get the readable transcript
    samples = (tmp_path / "samples.jsonl").read_text()
    assert "Sok/0/1" in samples and "rollout/trajectories" in samples


def test_a_table_goes_only_to_trackers_that_take_one(tmp_path):
    tracker = create_tracker(TrackingConfig(track_with=["jsonl"]), run_name="t", log_dir=str(tmp_path))
    tracker.log_table("k", ["a"], [[1]], step=1)  # jsonl has no tables: nothing happens, nothing fails
    tracker.finish()
    assert tracker.failures == {"jsonl": 0}
