"""Planning and validation (no Ray): device-mapping parsing, `roll plan` on good and broken configs."""
from __future__ import annotations

import textwrap

import pytest

from roll.cli import main as roll_main
from roll.config import ConfigError, load_config
from roll.distributed.resource_pool import (
    PoolInfo,
    format_ranks,
    make_plan,
    parse_device_mapping,
    validate_plan,
)

CPU_BOX = PoolInfo([0], [2.0], "test machine")  # a 2-core laptop without GPUs
GPU_NODE = PoolInfo([8], [64.0], "test gpu node")


def test_parse_device_mapping():
    assert parse_device_mapping("0-3,8-11") == [0, 1, 2, 3, 8, 9, 10, 11]
    assert parse_device_mapping(" 5 ") == [5]
    assert parse_device_mapping([2, 3]) == [2, 3]
    assert parse_device_mapping(None) == []
    assert format_ranks([0, 1, 2, 3, 8]) == "0-3,8"
    for bad in ("3-1", "0-x", "__import__('os')", "1,,2", [1, -1], 7):
        with pytest.raises(ValueError):
            parse_device_mapping(bad)


GPU_YAML = """
pipeline: agentic
rollout_batch_size: 16
resources: {device: auto}
actor_train:
  device_mapping: "0-7"
  strategy_args: {strategy_name: torch_train, strategy_config: {parallel: fsdp2}}
  training_args: {per_device_train_batch_size: 1, gradient_accumulation_steps: 2}
actor_infer:
  device_mapping: "0-7"
  num_gpus_per_worker: 2
  strategy_args: {strategy_name: vllm, strategy_config: {tensor_parallel_size: 2}}
reference:
  device_mapping: "0-7"
  strategy_args: {strategy_name: torch_train}
train_env_manager: {group_size: 4, num_env_workers: 2, tags: [lake]}
custom_envs: {lake: {env_id: roll/FrozenLake-v0}}
"""


def _cfg(tmp_path, text, name="cfg.yaml"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def test_gpu_yaml_plans_onto_cpu_slots(tmp_path, capsys):
    cfg = load_config(_cfg(tmp_path, GPU_YAML))
    plan = validate_plan(cfg, CPU_BOX)
    assert plan.device == "cpu" and plan.pool_size == 8 and plan.virtual_slots
    assert plan.roles["actor_train"].num_workers == 8 and plan.roles["actor_train"].dp_size == 8
    assert plan.roles["actor_infer"].num_workers == 4
    assert plan.roles["actor_infer"].devices[1] == [2, 3]
    assert set(plan.roles["actor_train"].colocated_with) == {"actor_infer", "reference"}
    assert plan.roles["env.train"].num_workers == 2
    # the same YAML on a real 8-GPU node
    gplan = validate_plan(cfg, GPU_NODE)
    assert gplan.device == "gpu" and gplan.pool_size == 8
    assert roll_main(["plan", str(tmp_path / "cfg.yaml")]) == 0
    out = capsys.readouterr().out
    assert "placement" in out and "actor_infer" in out and "plan OK" in out and "16 / 8" not in out
    assert "rollout_batch_size" in out and "dp x micro x grad_accum" in out


BROKEN = {
    "ranks outside the pool": ("resources: {num_devices: 4}\nactor_train: {device_mapping: '0-7'}\n",
                               "ranks 4-7 are outside the pool of 4"),
    "mapping not divisible": ("actor_infer: {device_mapping: '0-2', num_gpus_per_worker: 2}\n",
                              "3 devices are not divisible by num_gpus_per_worker=2"),
    "tensor parallel does not fit": (("actor_infer: {device_mapping: '0-3', num_gpus_per_worker: 2, "
                                      "strategy_args: {strategy_name: vllm, strategy_config: {tensor_parallel_size: 4}}}\n"),
                                     "tensor_parallel_size 4 x pipeline 1 does not fit num_gpus_per_worker=2"),
    "group size does not divide": ("rollout_batch_size: 10\ntrain_env_manager: {group_size: 4}\n",
                                   "rollout_batch_size 10 is not a multiple of the group size 4"),
    "mini-batch does not divide": ("actor_train: {device_mapping: '0-1', training_args: {per_device_train_batch_size: 3}}\n",
                                   "rollout_batch_size 16 is not a multiple of dp 2 x per_device_train_batch_size 3"),
    "bad range string": ("reference: {device_mapping: '0-3;4'}\n", "reference.device_mapping"),
    "duplicate ranks": ("actor_train: {device_mapping: [0, 1, 1, 2]}\n", "ranks listed twice: 1"),
    "world_size disagrees": ("actor_train: {device_mapping: '0-3', world_size: 2}\n", "world_size: 2 disagrees"),
    "gpu required": ("resources: {device: gpu}\n", "resources.device: gpu, but"),
    "reference on an inference engine": ("reference: {world_size: 1, strategy_args: {strategy_name: hf_infer}}\n",
                                         "reference.strategy_args.strategy_name: 'hf_infer' is an inference engine"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_plan_reports_each_problem(tmp_path, case):
    text, expected = BROKEN[case]
    cfg = load_config(_cfg(tmp_path, "pipeline: agentic\n" + text))  # defaults: rollout 16, group 8
    plan = make_plan(cfg, CPU_BOX)
    assert any(expected in e for e in plan.errors), plan.errors


def test_every_problem_listed_at_once(tmp_path, capsys):
    # five problems in one file: `roll plan` exits non-zero and prints all of them
    text = """
    pipeline: agentic
    rollout_batch_size: 10
    resources: {num_devices: 4}
    train_env_manager: {group_size: 4}
    actor_train: {device_mapping: '0-7', training_args: {per_device_train_batch_size: 3}}
    actor_infer:
      device_mapping: '0-2'
      num_gpus_per_worker: 2
    reference:
      device_mapping: '0-3'
      num_gpus_per_worker: 2
      strategy_args: {strategy_name: megatron, strategy_config: {tensor_model_parallel_size: 8}}
    """
    path = _cfg(tmp_path, text)
    assert roll_main(["plan", str(path)]) == 1
    out = " ".join(capsys.readouterr().out.split())
    for expected in ("ranks 4-7 are outside the pool of 4", "3 devices are not divisible by num_gpus_per_worker=2",
                     "tensor 8 x pipeline 1 parallel does not divide the 4 training devices",
                     "rollout_batch_size 10 is not a multiple of the group size 4",
                     "not a multiple of dp 8 x per_device_train_batch_size 3"):
        assert expected in out, expected
    with pytest.raises(ConfigError) as err:
        validate_plan(load_config(path), CPU_BOX)
    assert len(err.value.errors) >= 5
