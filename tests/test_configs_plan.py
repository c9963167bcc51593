"""Every shipped pipeline config passes `roll plan` (placement and batch arithmetic) on this
machine: GPU-scale configs plan onto CPU slots with resources.device: auto."""
from __future__ import annotations

from pathlib import Path

import pytest

from roll.config import load_config
from roll.distributed.resource_pool import make_plan

CONFIGS = sorted((Path(__file__).resolve().parents[1] / "configs").rglob("*.yaml"))


def test_configs_exist():
    names = {p.relative_to(p.parents[1]).as_posix() for p in CONFIGS}
    for required in ("agentic/sokoban_cpu.yaml", "agentic/frozenlake_cpu.yaml", "agentic/webshop_cpu.yaml",
                     "agentic/code_cpu.yaml", "agentic/multi_env_cpu.yaml", "agentic/sokoban_gpu.yaml"):
        assert required in names


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_config_plans_without_problems(path):
    cfg = load_config(path)
    plan = make_plan(cfg)
    assert plan.errors == [], plan.errors


def test_decaying_lr_in_step_mode_needs_num_training_steps():
    """Step-mode batches hold one sample per turn: the schedule length cannot come from max_steps."""
    base = Path(__file__).resolve().parents[1] / "configs" / "agentic" / "frozenlake_cpu.yaml"
    cosine = ["actor_train.training_args.lr_scheduler_type=cosine"]
    errors = make_plan(load_config(base, cosine)).errors
    assert any("actor_train.training_args.lr_scheduler_type cosine: in step mode" in e for e in errors), errors
    plan = make_plan(load_config(base, cosine + ["actor_train.training_args.num_training_steps=500"]))
    assert plan.errors == []
    rows = dict(plan.batch)
    assert "step mode: one sample per turn" in rows["actor_train: optimizer steps per pipeline step"]
    trajectory = ["train_env_manager.mode=trajectory", "val_env_manager.mode=trajectory"]
    assert make_plan(load_config(base, cosine + trajectory)).errors == []
