"""BasePipeline's resume rules, on its real step loop, checkpoints and jsonl tracker with a
small in-process pipeline (a linear model trained by SGD; no Ray): a resume never writes at or
below its step, trackers keep their records until a restore succeeded, damaged checkpoints are
skipped by name, and a run resumed after a fallback continues from the good checkpoint."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file

from roll.config import load_config
from roll.errors import CheckpointError
from roll.pipelines import base as base_module
from roll.pipelines.base import BasePipeline
from roll.utils import checkpoint as checkpoint_module

REPO = Path(__file__).resolve().parents[1]


class LinearPipeline(BasePipeline):
    """One SGD step per pipeline step on y = 3x; its weights are the checkpointed state."""

    fail_load = False

    def setup(self) -> None:
        self.w = torch.zeros(4)

    def train_step(self, step: int) -> dict[str, float]:
        x = torch.randn(8, 4)  # from the seeded (and checkpointed) driver generator
        grad = 2 * ((x @ self.w - 3 * x.sum(1))[:, None] * x).mean(0)
        self.w -= 0.1 * grad
        return {"train/w0": float(self.w[0])}

    def save_state(self, ckpt_dir: Path) -> dict[str, Any]:
        (ckpt_dir / "actor_train").mkdir()
        save_file({"w": self.w.clone()}, str(ckpt_dir / "actor_train" / "model.safetensors"))
        return {}

    def load_state(self, ckpt_dir: Path, state: dict[str, Any]) -> None:
        if self.fail_load:
            raise RuntimeError("worker could not load the checkpoint")
        self.w = load_file(str(ckpt_dir / "actor_train" / "model.safetensors"))["w"]

    def shutdown(self) -> None:
        pass

    def write_plots(self) -> None:
        pass


def _cfg(out: Path, **over: Any):
    args = {"output_dir": str(out), "save_steps": 1, "eval_steps": 0, "show_progress": False, "max_ckpt_to_keep": 0,
            "tracking.track_with": "[jsonl]", **over}
    return load_config(REPO / "configs/sft/frozenlake_sft_cpu.yaml", [f"{k}={v}" for k, v in args.items()])


def _metrics(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "logs" / "metrics.jsonl").read_text().splitlines()]


def _snapshot(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


@pytest.fixture
def six_steps(tmp_path):
    out = tmp_path / "run"
    LinearPipeline(_cfg(out, max_steps=6)).run()
    return out


def test_max_steps_at_or_below_the_checkpoint_is_an_error_before_anything_is_written(six_steps):
    before = _snapshot(six_steps)
    for max_steps in (4, 6):
        with pytest.raises(CheckpointError, match=f"step-6 is at step 6 and max_steps={max_steps} is not above it"):
            LinearPipeline(_cfg(six_steps, max_steps=max_steps, resume_from_checkpoint=True)).run()
    assert _snapshot(six_steps) == before  # step-4, latest, metrics, config.yaml: all untouched


def test_failed_restore_keeps_the_metrics(six_steps):
    before = (six_steps / "logs" / "metrics.jsonl").read_text()
    pipe = LinearPipeline(_cfg(six_steps, max_steps=8, resume_from_checkpoint=str(six_steps / "checkpoints" / "step-2")))
    pipe.fail_load = True
    with pytest.raises(RuntimeError, match="could not load"):
        pipe.run()
    assert (six_steps / "logs" / "metrics.jsonl").read_text() == before
    assert [r["step"] for r in _metrics(six_steps)] == [1, 2, 3, 4, 5, 6]


def test_resume_falls_back_past_a_truncated_checkpoint_and_continues(six_steps, tmp_path, log_calls):
    reference = tmp_path / "reference"
    LinearPipeline(_cfg(reference, max_steps=8)).run()
    weights = six_steps / "checkpoints" / "step-6" / "actor_train" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:40])  # COMPLETE still present
    calls = log_calls(checkpoint_module.logger)
    LinearPipeline(_cfg(six_steps, max_steps=8, resume_from_checkpoint=True)).run()
    assert any(level == "WARNING" and "step-6" in m and "model.safetensors" in m for level, m in calls)
    got = {r["step"]: r["train/w0"] for r in _metrics(six_steps)}
    want = {r["step"]: r["train/w0"] for r in _metrics(reference)}
    assert sorted(got) == list(range(1, 9))
    assert got == pytest.approx(want, rel=1e-6)  # weights and driver RNG restored from step-5


def test_explicit_damaged_checkpoint_is_refused_by_name(six_steps):
    ckpt = six_steps / "checkpoints" / "step-3"
    (ckpt / "driver_state.json").write_text("{")
    with pytest.raises(CheckpointError, match="step-3"):
        LinearPipeline(_cfg(six_steps, max_steps=8, resume_from_checkpoint=str(ckpt)))


def test_a_resume_names_each_setting_that_differs_from_the_checkpoints_run(six_steps, log_calls):
    cfg = _cfg(six_steps, max_steps=8, resume_from_checkpoint=True, seed=7, **{"actor_train.training_args.lr": 2e-4})
    calls = log_calls(base_module.logger)
    LinearPipeline(cfg)  # before setup: before Ray would start
    warnings = [m for level, m in calls if level == "WARNING"]
    assert len(warnings) == 1, warnings
    assert "2 setting(s)" in warnings[0] and "seed: 42 -> 7" in warnings[0]
    assert "actor_train.training_args.lr: 0.001 -> 0.0002" in warnings[0]
    assert ("INFO", "resume: max_steps 6 -> 8") in calls


def test_a_resume_that_only_runs_longer_warns_of_nothing(six_steps, log_calls):
    calls = log_calls(base_module.logger)
    LinearPipeline(_cfg(six_steps, max_steps=8, resume_from_checkpoint=True)).run()
    assert ("INFO", "resume: max_steps 6 -> 8") in calls
    assert [m for level, m in calls if level == "WARNING"] == []
    state = json.loads((six_steps / "checkpoints" / "step-8" / "driver_state.json").read_text())
    assert state["config"]["max_steps"] == 8 and state["config"]["seed"] == 42


class ValidatingPipeline(LinearPipeline):
    def setup(self) -> None:
        super().setup()
        self.validated: list[int] = []

    def validate(self, step: int) -> dict[str, float]:
        self.validated.append(step)
        return {"val/w0": float(self.w[0])}


def test_the_final_model_is_validated_where_eval_steps_does_not_divide_max_steps(tmp_path):
    pipe = ValidatingPipeline(_cfg(tmp_path / "run", max_steps=5, eval_steps=2, save_steps=0))
    pipe.run()
    assert pipe.validated == [0, 2, 4, 5]
    assert [r["step"] for r in _metrics(tmp_path / "run") if "val/w0" in r] == [0, 2, 4, 5]
    divides = ValidatingPipeline(_cfg(tmp_path / "even", max_steps=4, eval_steps=2, save_steps=0))
    divides.run()
    assert divides.validated == [0, 2, 4]  # the last step once


class ShortSchedulePipeline(LinearPipeline):
    """Reports the lr of a linear schedule over 4 steps, in a longer run."""

    def train_step(self, step: int) -> dict[str, float]:
        return {**super().train_step(step), "actor/lr": 1e-3 * max(0.0, 1 - step / 4)}


def test_a_run_that_outlives_its_lr_schedule_says_so_at_the_end(tmp_path, log_calls):
    calls = log_calls(base_module.logger)
    ShortSchedulePipeline(_cfg(tmp_path / "run", max_steps=8, save_steps=0)).run()
    [msg] = [m for level, m in calls if level == "WARNING" and "actor/lr reached 0" in m]
    assert msg.startswith("actor/lr reached 0 at step 5 and stayed 0 for the last 4 of the run's 8 steps")
