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
    from roll.pipelines.chain import is_chain_file, load_chain

    if is_chain_file(path):  # a chain (`stages:`): every stage's resolved config
        _, stages = load_chain(path)
        assert [e for st in stages for e in make_plan(st.cfg).errors] == []
        return
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


@pytest.mark.parametrize("mapping, tp, dp", [("0-3", 2, 2), ("0-3", 1, 4), (None, 2, 2)])
def test_one_dp_size_for_plan_and_lr_schedule(mapping, tp, dp):
    """The LR schedule length uses the plan's dp (world / (tp x pp)), not the worker count."""
    from roll.pipelines.policy import optimizer_steps_per_step

    from roll.config.schema import PipelineConfig

    cfg = PipelineConfig()
    role = cfg.actor_train
    role.strategy_args.strategy_name = "megatron"
    role.strategy_args.strategy_config = {"tensor_model_parallel_size": tp}
    role.device_mapping, role.world_size = mapping, (4 if mapping is None else None)
    plan = make_plan(cfg)
    placement = plan.roles["actor_train"]
    assert (placement.num_workers, placement.tp, placement.dp_size) == (4, tp, dp)
    ta = role.training_args
    per_step = ta.per_device_train_batch_size * ta.gradient_accumulation_steps * dp
    want = max(1, -(-cfg.rollout_batch_size // per_step)) * cfg.algorithm.ppo_epochs
    assert optimizer_steps_per_step(cfg)["actor"] == want


def test_env_workers_reserve_their_configured_cpus():
    """The planner reserves num_cpus_per_env_worker per env worker (one role per scheduler)."""
    from roll.config.schema import PipelineConfig

    cfg = PipelineConfig()
    if cfg.pipeline != "agentic":
        pytest.skip("the default pipeline is not agentic")
    cfg.train_env_manager.num_env_workers, cfg.train_env_manager.num_cpus_per_env_worker = 3, 0.25
    plan = make_plan(cfg)
    env = plan.roles["env.train"]
    assert (env.num_workers, env.num_cpus_per_worker) == (3, 0.25)
