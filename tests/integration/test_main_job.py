"""The README's main job (configs/agentic/frozenlake_main_cpu.yaml) end to end through the CLI,
every stage shrunk by overrides: baseline eval, demos, SFT and GRPO in one `roll run`, the
summary on stdout, and a rerun that skips every finished stage without starting Ray."""
from __future__ import annotations

import json

import pytest
import yaml

from roll.cli import main as roll_main
from tests.integration.helpers import REPO, check_run, check_view, run_cli

pytestmark = pytest.mark.integration

MAIN = "configs/agentic/frozenlake_main_cpu.yaml"
TINY = [
    "stages.baseline.overrides.val_batch_size=4",
    "stages.demos.demos.episodes=8",
    "stages.sft.overrides.max_steps=2",
    "stages.grpo.overrides.max_steps=2",
    "stages.grpo.overrides.eval_steps=2",
    "stages.grpo.overrides.save_steps=1",
    "stages.grpo.overrides.val_batch_size=4",
    "stages.grpo.overrides.rollout_batch_size=8",
    "stages.grpo.overrides.train_env_manager.group_size=4",
    "stages.grpo.overrides.actor_train.training_args.per_device_train_batch_size=8",
    # for `roll view` (the grpo stage stands for configs/agentic/frozenlake_cpu.yaml, its base, in
    # tests/integration/test_agentic_pipeline.py)
    "stages.grpo.overrides.tracking.dump_trajectories=4",
]


def test_main_chain_runs_every_stage_and_prints_the_summary(tmp_path, capsys):
    out = tmp_path / "main"
    # four stages, three of them pipelines: a loaded machine stretches it (7.7 min at a load average of
    # 30 on 2 cores), hence the generous limit
    proc = run_cli(["run", MAIN, f"output_dir={out}", *TINY], timeout=780)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    state = json.loads((out / "chain_state.json").read_text())["stages"]
    assert list(state) == ["baseline", "demos", "sft", "grpo"]
    assert all(r["status"] == "done" for r in state.values())
    assert (out / "grpo" / "final_model" / "config.json").exists()
    check_run(out / "grpo", 2)
    check_view(out / "grpo", tmp_path / "report.html")
    # each stage ran on the previous stage's output
    assert yaml.safe_load((out / "sft" / "config.yaml").read_text())["data"]["train_files"] == [str(out / "demos" / "demos.jsonl")]
    assert yaml.safe_load((out / "grpo" / "config.yaml").read_text())["pretrain"] == str(out / "sft" / "final_model")
    summary = json.loads((out / "summary.json").read_text())
    labels = [p["label"] for p in summary["points"]]
    assert labels == ["baseline: untrained (roll-tiny://tiny)", "grpo step 0 (the sft model)", "grpo step 2 (end)"]
    assert all(set(p["success"]["FrozenLake"]) == {"greedy", "sampled"} for p in summary["points"])
    text = proc.stdout
    assert "held-out success on FrozenLake" in text and "gain of the last stage" in text
    assert f"final model: {out / 'grpo' / 'final_model'}" in text and f"report: roll view {out / 'grpo'}" in text

    # everything finished: the rerun skips every stage (no Ray) and prints the summary again; in
    # this process, as it starts nothing (a second interpreter would cost more than the rerun)
    capsys.readouterr()
    assert roll_main(["run", str(REPO / MAIN), f"output_dir={out}", *TINY]) == 0
    again = capsys.readouterr()
    assert again.out.count(": skipped (done, output") == 4 and "grpo step 2 (end)" in again.out, again.err[-3000:]
