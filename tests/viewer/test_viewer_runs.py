"""`roll view` on the output of the shipped SFT CPU config (the agentic configs are covered by
tests/integration/test_agentic_pipeline.py and test_browser.py, the RLVR config by
tests/rlvr/test_pipeline_cli.py)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from roll.cli import main as roll_main
from roll.viewer.run_data import load_run

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def test_sft_config_two_steps_dumps_its_conversations_and_views(tmp_path, ray_cluster):
    demos = tmp_path / "demos.jsonl"
    assert roll_main(["data", "demos", str(REPO / "configs/agentic/frozenlake_cpu.yaml"), "--out", str(demos),
                      "--episodes", "16", "--epsilon", "0.5"]) == 0
    out = tmp_path / "run"
    assert roll_main(["run", str(REPO / "configs/sft/frozenlake_sft_cpu.yaml"), "max_steps=2", "eval_steps=0",
                      "rollout_batch_size=8", "actor_train.training_args.per_device_train_batch_size=4",
                      "actor_train.training_args.gradient_accumulation_steps=2", "tracking.dump_trajectories=3",
                      "show_progress=false", f"data.train_files=[{demos}]", f"output_dir={out}"]) == 0
    data = load_run(out)
    assert data.trajectory_steps == [1, 2]
    assert [t["step"] for t in data.trajectories] == [1, 1, 1, 2, 2, 2]
    for t in data.trajectories:
        assert t["kind"] == "sft" and t["num_turns"] >= 1
        assert "<answer>" in t["turns"][0]["model_text"]  # the demonstration's action is the trained span
        assert sum(t["tokens"]["mask"]) > 0 and t["tokens"]["logprobs"] is None
    assert roll_main(["view", str(out)]) == 0
    html = (out / "report.html").read_text()
    embedded = json.loads(re.search(r'<script id="roll-data" type="application/json">(.*?)</script>', html, re.DOTALL).group(1))
    assert {p["id"] for p in embedded["panels"]} >= {"loss"}  # the SFT NLL curve
    assert len(embedded["trajectories"]) == 6
    assert (out / "plots" / "loss.png").exists()
