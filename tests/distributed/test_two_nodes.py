"""AutoDeviceMapping across nodes, on a simulated two-node Ray cluster (``ray.cluster_utils``;
each node declares 4 GPUs as a resource, no real GPU): the plan's node of each slot is where the
workers land, a tensor-parallel group never spans nodes, and ``roll plan`` shows the nodes.

The cluster runs in a subprocess so that the test session's shared Ray cluster
(tests/conftest.py) is left alone."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from roll.config.roles import StrategyArgs, WorkerConfig
from roll.config.schema import ResourcesConfig
from roll.distributed.resource_pool import PoolInfo, plan_roles

TWO_NODES = PoolInfo([4, 4], [8.0, 8.0], "two test nodes", ["node-a", "node-b"])

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import ray
    from ray.cluster_utils import Cluster as RayCluster
    from roll.config.roles import StrategyArgs, WorkerConfig
    from roll.config.schema import ResourcesConfig
    from roll.distributed.cluster import Cluster
    from roll.distributed.resource_pool import ResourcePool
    from roll.workers.base import Worker

    class NodeWorker(Worker):
        def where(self):
            return ray.get_runtime_context().get_node_id()

    # no idle workers started ahead: every process here is an actor with its own runtime_env
    nodes = RayCluster(initialize_head=True, head_node_args={
        "num_cpus": 3, "num_gpus": 4,
        "_system_config": {"enable_worker_prestart": False, "prestart_worker_first_driver": False}})
    nodes.add_node(num_cpus=3, num_gpus=4)
    nodes.wait_for_nodes()
    ray.init(address=nodes.address, namespace="two-nodes", log_to_driver=False)
    out = {}
    try:
        for name, train, infer in (("disaggregated", "0-3", "4-7"), ("colocated", "0-7", "0-7")):
            # four devices per worker (a quarter of the processes, each a second or more of start-up
            # on 2 cores), the same placement question: a worker per node where a role spans both
            roles = {"actor_train": WorkerConfig(device_mapping=train, num_gpus_per_worker=4, num_cpus_per_worker=0.01,
                                                 strategy_args=StrategyArgs("torch_train")),
                     "actor_infer": WorkerConfig(device_mapping=infer, num_gpus_per_worker=4, num_cpus_per_worker=0.01)}
            pool = ResourcePool(ResourcesConfig(device="auto", cpus_per_device_slot=0.1), roles, timeout_s=60)
            run = {"node_ids": pool.plan.pool.node_ids}
            for role, wc in roles.items():
                cl = Cluster(role, NodeWorker, wc, pool, setup_timeout_s=120)
                run[role] = {"landed": cl.call("where"), "planned": [pool.plan.node_of(d[0]) for d in cl.devices]}
                cl.shutdown()
            pool.shutdown()
            out[name] = run
    finally:
        ray.shutdown()
        nodes.shutdown()
    with open(sys.argv[1], "w") as f:
        json.dump(out, f)
    """
)


@pytest.mark.integration
def test_workers_land_on_the_planned_nodes(tmp_path):
    out = tmp_path / "landed.json"
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled")
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(out)], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    res = json.loads(out.read_text())
    for name, run in res.items():
        node_ids = run["node_ids"]
        assert len(set(node_ids)) == 2
        for role in ("actor_train", "actor_infer"):
            want = [node_ids[int(n)] for n in run[role]["planned"]]
            assert run[role]["landed"] == want, (name, role, run)
    disagg = res["disaggregated"]
    assert disagg["actor_train"]["landed"] == [disagg["node_ids"][0]]  # devices 0-3: the first node
    assert disagg["actor_infer"]["landed"] == [disagg["node_ids"][1]]  # devices 4-7: the second
    colo = res["colocated"]
    assert colo["actor_train"]["landed"] == colo["actor_infer"]["landed"]  # same slots, same nodes
    first, second = colo["node_ids"]
    assert colo["actor_train"]["landed"] == [first, second]


def _megatron(mapping: str, tp: int) -> WorkerConfig:
    return WorkerConfig(device_mapping=mapping, strategy_args=StrategyArgs("megatron", {"tensor_model_parallel_size": tp}))


def test_a_tensor_parallel_group_never_spans_nodes():
    ok = plan_roles(ResourcesConfig(device="auto"), {"actor_train": _megatron("0-7", 4)}, TWO_NODES)
    assert ok.errors == [] and ok.roles["actor_train"].dp_size == 2
    bad = plan_roles(ResourcesConfig(device="auto"), {"actor_train": _megatron("2-5", 4)}, TWO_NODES)
    assert any("tensor-parallel group on devices 2-5 spans several nodes" in e for e in bad.errors), bad.errors
    fine = plan_roles(ResourcesConfig(device="auto"), {"actor_train": _megatron("2-5", 2)}, TWO_NODES)
    assert fine.errors == []


def test_roll_plan_shows_the_node_of_each_slot(capsys):
    from roll.config.schema import PipelineConfig
    from roll.distributed.resource_pool import print_plan

    cfg = PipelineConfig()
    cfg.resources.device = "auto"
    cfg.actor_train.device_mapping, cfg.actor_train.world_size = "2-5", None
    cfg.actor_infer.device_mapping, cfg.actor_infer.world_size = "6-7", None
    print_plan(cfg, TWO_NODES)
    out = capsys.readouterr().out
    assert "2-3 (node 0), 4-5 (node 1)" in out and "6-7 (node 1)" in out


PIPELINE = textwrap.dedent(
    """
    import sys
    import ray
    from ray.cluster_utils import Cluster as RayCluster
    from roll.cli import main as roll_main

    nodes = RayCluster(initialize_head=True, head_node_args={"num_cpus": 4, "num_gpus": 4})
    nodes.add_node(num_cpus=4, num_gpus=4)
    nodes.wait_for_nodes()
    try:
        rc = roll_main(["run", "configs/agentic/sokoban_cpu.yaml", "max_steps=1", "eval_steps=0", "save_steps=0",
                        "show_progress=false", f"output_dir={sys.argv[1]}", f"ray.address={nodes.address}",
                        "resources.device=auto", "actor_train.device_mapping=[0]", "actor_infer.device_mapping=[4]",
                        "actor_train.world_size=null", "actor_infer.world_size=null"])
    finally:
        if ray.is_initialized():
            ray.shutdown()
        nodes.shutdown()
    sys.exit(rc)
    """
)


@pytest.mark.slow
@pytest.mark.integration
def test_a_pipeline_step_on_two_nodes(tmp_path):
    """One agentic step with CPU strategies, the trainer on node 0's device 0 and the inference
    worker on node 1's device 4 (about 2 minutes on a loaded 2-core machine)."""
    repo = Path(__file__).resolve().parents[2]
    out = tmp_path / "run"
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled")
    proc = subprocess.run([sys.executable, "-c", PIPELINE, str(out)], capture_output=True, text=True, timeout=600,
                          env=env, cwd=repo)
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = [json.loads(line) for line in (out / "logs" / "metrics.jsonl").read_text().splitlines()]
    step1 = {k: v for r in rows if r["step"] == 1 for k, v in r.items()}
    assert "actor/loss" in step1 and step1["rollout/train_infer_logprob_diff"] < 1e-4
