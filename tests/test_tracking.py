"""Tracking backends write what they are given; missing packages fail at start-up."""
from __future__ import annotations

import io
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from roll.config import ConfigError, TrackingConfig
from roll.registry import TRACKERS
from roll.tracking import TrackerGroup, create_tracker, to_scalars
from roll.tracking.backends import StdoutTracker

CONFIG = {"exp_name": "t", "actor_train": {"training_args": {"lr": 1e-5}}}


def _read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_builtins_registered():
    assert {"stdout", "jsonl", "tensorboard", "wandb", "swanlab"} <= set(TRACKERS.ids())


def test_to_scalars_converts_and_reports_bad_values():
    scalars, bad = to_scalars({
        "a/int": 3, "a/float": 0.5, "a/bool": True, "a/np": np.float32(1.5), "a/t": torch.tensor(2.0),
        "a/t1": torch.tensor([4.0]), "bad/vec": torch.ones(3), "bad/str": "x", "bad/none": None,
    })
    assert scalars == {"a/int": 3.0, "a/float": 0.5, "a/bool": 1.0, "a/np": 1.5, "a/t": 2.0, "a/t1": 4.0}
    assert sorted(bad) == ["bad/none", "bad/str", "bad/vec"]


def test_jsonl_lines_and_resume_truncation(tmp_path):
    cfg = TrackingConfig(track_with=["jsonl"])
    tracker = create_tracker(cfg, "run", str(tmp_path), CONFIG)
    for step in range(1, 5):
        tracker.log({"actor/loss": 1.0 / step, "reward/mean": step, "bad": "skip me"}, step)
    tracker.log({"actor/loss": float("nan")}, 5)
    tracker.log_text("trajectory/0", "#####\n#P_X#\n<answer>Right</answer>", 4)
    tracker.finish()
    rows = _read_jsonl(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5]
    assert rows[1]["actor/loss"] == 0.5 and rows[3]["reward/mean"] == 4.0
    assert rows[4]["actor/loss"] is None  # NaN is not JSON
    assert all("bad" not in r for r in rows)
    assert tracker.dropped_keys == {"bad"}
    samples = _read_jsonl(tmp_path / "samples.jsonl")
    assert samples == [{"step": 4, "key": "trajectory/0", "text": "#####\n#P_X#\n<answer>Right</answer>"}]

    # A resumed run (from the step-2 checkpoint) drops what the first run logged after step 2.
    resumed = create_tracker(cfg, "run", str(tmp_path), CONFIG, resume_step=2)
    resumed.log({"actor/loss": 0.1}, 3)
    resumed.finish()
    rows = _read_jsonl(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert rows[-1]["actor/loss"] == 0.1
    assert _read_jsonl(tmp_path / "samples.jsonl") == []


def test_tracking_log_dir_overrides_default(tmp_path):
    cfg = TrackingConfig(track_with=["jsonl"], log_dir=str(tmp_path / "custom"))
    tracker = create_tracker(cfg, "run", str(tmp_path / "default"), CONFIG)
    tracker.log({"x": 1}, 0)
    tracker.finish()
    assert (tmp_path / "custom" / "metrics.jsonl").exists()
    assert not (tmp_path / "default").exists()


def test_stdout_compact_line():
    out = io.StringIO()
    tracker = StdoutTracker(run_name="r", log_dir="", config={}, project="p", stream=out, max_text_chars=10,
                            full=True)
    tracker.log({"actor/loss": 0.123456, "actor/lr": 1e-6, "reward/mean": 2.0, "plain": 1}, 7)
    tracker.log_text("trajectory/0", "x" * 50, 7)
    lines = out.getvalue().splitlines()
    assert lines[0] == "[step 7] plain=1 | actor: loss=0.1235 lr=1e-06 | reward: mean=2"
    assert lines[1] == "[step 7] trajectory/0:"
    assert lines[2] == "x" * 10 + "... [50 chars]"


def test_stdout_text_can_be_silenced(capsys):
    cfg = TrackingConfig(track_with=["stdout"], tracker_kwargs={"stdout": {"max_text_chars": 0, "full": True}})
    tracker = create_tracker(cfg, "r", "unused", CONFIG)
    tracker.log_text("k", "hidden", 1)
    tracker.log({"a/b": 1.5}, 1)
    tracker.finish()
    assert capsys.readouterr().out == "[step 1] a: b=1.5\n"


def test_tensorboard_event_files_read_back(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    cfg = TrackingConfig(track_with=["tensorboard"])
    tracker = create_tracker(cfg, "run", str(tmp_path), CONFIG)
    for step in range(3):
        tracker.log({"actor/loss": 1.0 - 0.25 * step, "timing/step_s": 0.5}, step)
    tracker.log_text("trajectory/0", "#__#\n#P√#", 2)
    tracker.finish()
    event_dir = tmp_path / "tensorboard"
    assert list(event_dir.glob("events.out.tfevents.*"))
    acc = EventAccumulator(str(event_dir), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    loss = acc.Scalars("actor/loss")
    assert [e.step for e in loss] == [0, 1, 2]
    assert [e.value for e in loss] == pytest.approx([1.0, 0.75, 0.5])
    tags = acc.Tags()["tensors"]
    assert "trajectory/0/text_summary" in tags and "config/text_summary" in tags
    text = acc.Tensors("trajectory/0/text_summary")[0].tensor_proto.string_val[0].decode()
    assert "#P√#" in text


@pytest.mark.integration
def test_wandb_offline_run_directory(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    for var in ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR", "WANDB_ARTIFACT_DIR"):
        monkeypatch.setenv(var, str(tmp_path / "wandb-home"))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    cfg = TrackingConfig(track_with=["wandb"], project="roll-test", tracker_kwargs={"tags": ["unit"]})
    tracker = create_tracker(cfg, "offline-run", str(tmp_path / "logs"), CONFIG)
    run = tracker.trackers["wandb"].run
    assert run.name == "offline-run" and run.config["exp_name"] == "t"
    tracker.log({"actor/loss": 0.5}, 1)
    tracker.log_text("trajectory/0", "<answer>Up</answer>", 1)
    tracker.finish()
    assert tracker.failures == {"wandb": 0}
    runs = list((tmp_path / "logs" / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    assert list(runs[0].glob("run-*.wandb"))
    assert (tmp_path / "logs" / "wandb_run_id").read_text().strip() == run.id


def test_missing_package_fails_at_creation_naming_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "swanlab", None)  # makes `import swanlab` fail
    cfg = TrackingConfig(track_with=["jsonl", "swanlab"])
    with pytest.raises(ConfigError) as err:
        create_tracker(cfg, "run", str(tmp_path), CONFIG)
    message = str(err.value)
    assert "swanlab" in message and "pip install 'roll[swanlab]'" in message
    # Nothing started: the jsonl backend did not create its files before the check failed.
    assert not (tmp_path / "metrics.jsonl").exists()


def test_unknown_tracker_is_a_config_error_with_suggestion(tmp_path):
    cfg = TrackingConfig(track_with=["tensorbord"])
    with pytest.raises(ConfigError, match="did you mean 'tensorboard'"):
        create_tracker(cfg, "run", str(tmp_path), CONFIG)


def test_failing_backend_is_counted_and_others_keep_logging(tmp_path):
    class Broken:
        def log(self, metrics, step):
            raise OSError("disk full")

        def log_text(self, key, text, step):
            raise OSError("disk full")

        def finish(self):
            pass

    out = io.StringIO()
    good = StdoutTracker(run_name="r", log_dir="", config={}, project="p", stream=out, full=True)
    group = TrackerGroup({"broken": Broken(), "stdout": good})
    for step in range(3):
        group.log({"x": step}, step)
    group.finish()
    assert group.failures == {"broken": 3, "stdout": 0}
    assert len(out.getvalue().splitlines()) == 3
    assert math.isclose(float(out.getvalue().splitlines()[-1].split("=")[1]), 2.0)


def test_resolve_trackers_checks_names_and_options():
    """What a pipeline calls at start-up; the tracker itself (which cuts files on resume) is
    created only after the restore succeeded."""
    from roll.tracking import resolve_trackers

    assert set(resolve_trackers(TrackingConfig(track_with=["jsonl", "stdout"]))) == {"jsonl", "stdout"}
    with pytest.raises(ConfigError, match="jsonll"):
        resolve_trackers(TrackingConfig(track_with=["jsonll"]))
    with pytest.raises(ConfigError, match="tracker_kwargs.jsonl: expected a mapping"):
        resolve_trackers(TrackingConfig(track_with=["jsonl"], tracker_kwargs={"jsonl": 3}))
