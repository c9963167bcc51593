"""The agentic pipeline end to end on the tiny model: every tiny CPU config through the CLI,
placements, checkpoints and the final Hugging Face model."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from roll.cli import main as roll_main
from roll.config.loader import load_raw
from roll.utils.checkpoint import COMPLETE_MARKER

from .helpers import REPO, read_metrics

pytestmark = pytest.mark.integration

# chains (`stages:`, e.g. frozenlake_main_cpu.yaml) run in tests/integration/test_main_job.py;
# sokoban_cpu.yaml (README's main job) runs with the same checks in test_main_job_command_runs_two_steps
MAIN_JOB = REPO / "configs" / "agentic" / "sokoban_cpu.yaml"
TINY_AGENTIC = sorted(p for p in (REPO / "configs" / "agentic").glob("*_cpu.yaml")
                      if p.name != "base_cpu.yaml" and p != MAIN_JOB and "stages" not in yaml.safe_load(p.read_text()))


def _without_idle_validation(config: Path) -> list[str]:
    """With eval_steps=0 the validation env workers only start and stop again. Where they would
    play the training env tags (every tiny config but multi_env_cpu.yaml) that start-up repeats
    what the training env workers do, so they are left out; the validation rounds themselves run
    in test_main_job_command_runs_two_steps and tests/integration/test_main_job.py."""
    raw = load_raw(config)
    val = raw.get("val_env_manager")
    if val is None or set(val.get("tags") or []) <= set(raw["train_env_manager"]["tags"]):
        return ["val_env_manager=null"]
    return []


def _check_run(out: Path, steps: int) -> dict[int, dict[str, float]]:
    metrics = read_metrics(out)
    for step in range(1, steps + 1):
        assert step in metrics, f"no metrics for step {step}"
        m = metrics[step]
        assert any(k.startswith("env/") and k.endswith("/success") for k in m), sorted(m)
        assert "actor/loss" in m or m.get("rollout/empty_batch") == 1.0
    ckpt = out / "checkpoints" / f"step-{steps}"
    assert (ckpt / COMPLETE_MARKER).exists()
    assert (ckpt / "actor_train" / "trainer_state.pt").exists()
    return metrics


def _check_view(out: Path, report: Path | None = None) -> None:
    """`roll view` and the plots work on the run's output (docs/viewer.md); the report goes to
    ``report`` if given (a run shared with other tests is only read)."""
    from roll.viewer.report import build_report
    from roll.viewer.run_data import load_run

    data = load_run(out)
    assert data.trajectories and {t["kind"] for t in data.trajectories} == {"agentic"}
    assert all(t["turns"] and t["tokens"]["ids"] for t in data.trajectories)
    assert build_report(out, report).stat().st_size > 0
    assert (out / "plots" / "learning_curves.png").exists()


def test_main_job_command_runs_two_steps(console_run, tmp_path):
    """README's main job, shortened: the real CLI in a subprocess (the run whose console
    tests/integration/test_console_output.py reads; tests/integration/conftest.py)."""
    out, proc = console_run
    assert proc.returncode == 0, proc.stderr[-4000:]
    metrics = _check_run(out, 2)
    assert "val/env/SimpleSokoban/success" in metrics[0]
    assert "val/env/SimpleSokoban/success" in metrics[2]
    assert sorted(p.name for p in (out / "trajectories").glob("step-*")) == ["step-000001.jsonl.gz", "step-000002.jsonl.gz"]
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(out / "final_model")
    tok = AutoTokenizer.from_pretrained(out / "final_model")
    assert model.config.vocab_size >= len(tok)
    _check_view(out, tmp_path / "report.html")


@pytest.mark.parametrize("config", TINY_AGENTIC, ids=lambda p: p.stem)
def test_tiny_config_two_steps(config, tmp_path, ray_cluster):
    out = tmp_path / "run"
    rc = roll_main(["run", str(config), "max_steps=2", "save_steps=0", "eval_steps=0", "show_progress=false",
                    f"output_dir={out}", *_without_idle_validation(config)])
    assert rc == 0
    _check_run(out, 2)
    _check_view(out)


@pytest.mark.parametrize("placement", ["colocated", "disaggregated"])
def test_placements_complete(placement, tmp_path, ray_cluster):
    infer_mapping = "0" if placement == "colocated" else "1"
    out = tmp_path / placement
    rc = roll_main(["run", str(REPO / "configs/agentic/sokoban_cpu.yaml"), "max_steps=2", "eval_steps=0",
                    "val_env_manager=null", "show_progress=false", f"output_dir={out}",
                    "actor_train.device_mapping=[0]", f"actor_infer.device_mapping=[{infer_mapping}]",
                    "actor_train.world_size=null", "actor_infer.world_size=null"])
    assert rc == 0
    metrics = _check_run(out, 2)
    # the weights of step 1 reached the inference worker before step 2's rollouts
    assert metrics[2]["rollout/policy_version"] == 1.0
