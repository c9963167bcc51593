"""Start-up and footprint of an RLVR run: roles built at once on CPU, reward workers without
torch, a local Ray cluster without idle prestarted workers or spinning OpenMP threads."""
import subprocess
import sys
import threading
import time

import pytest

from roll.pipelines.policy import PolicyTrainer, build_concurrently
from roll.config import load_config


def _cfg(tmp_path, *overrides):
    return load_config("configs/rlvr/multi_domain_cpu.yaml", [f"output_dir={tmp_path}", *overrides])


def test_build_concurrently_runs_builders_at_once():
    barrier = threading.Barrier(3, timeout=10)  # each builder waits for the two others

    def build(name):
        def fn():
            barrier.wait()
            return name
        return fn

    assert build_concurrently({k: build(k) for k in "abc"}) == {"a": "a", "b": "b", "c": "c"}


def test_build_concurrently_raises_after_every_builder_finished():
    finished = []

    def slow():
        time.sleep(0.3)
        finished.append("slow")
        return 1

    def broken():
        raise ValueError("no model")

    with pytest.raises(ValueError, match="no model"):
        build_concurrently({"slow": slow, "broken": broken})
    assert finished == ["slow"]  # the pipeline's shutdown sees every cluster that was built


def test_policy_roles_are_built_concurrently_on_cpu(tmp_path, monkeypatch):
    """actor_train and actor_infer start together: each stands in for a worker set-up that
    only returns once the other role's has begun (one after another, the first would wait
    forever; the barrier times out instead)."""
    import roll.pipelines.policy as policy

    cfg = _cfg(tmp_path, "resources.device=cpu")
    barrier = threading.Barrier(2, timeout=10)
    built = []

    class Built:
        def __init__(self, role):
            self.role = role
            self.on_restart = None

    def make_cluster(role, worker_cls, worker_cfg, **kwargs):
        barrier.wait()
        built.append(role)
        return Built(role)

    monkeypatch.setattr(policy, "ModelUpdateGroup", lambda train, infers, size: (train.role, [c.role for c in infers]))
    trainer = PolicyTrainer(cfg, make_cluster, timer=None)
    assert sorted(built) == ["actor_infer", "actor_train"]
    assert trainer.actor_train.role == "actor_train" and trainer.actor_infer.role == "actor_infer"
    assert trainer.model_update == ("actor_train", ["actor_infer"])


def test_reward_worker_never_imports_torch(tmp_path):
    """A reward worker scores text: importing torch (for ping's device) cost every reward
    process about 150 MB and seconds of start-up."""
    code = (
        "import asyncio, sys\n"
        "from roll.config.roles import WorkerConfig\n"
        "from roll.config.schema import RewardConfig\n"
        "from roll.workers.reward import RewardWorker\n"
        "w = RewardWorker('reward.math', 0, 1, WorkerConfig(), reward_config=RewardConfig(reward_fn='math_rule'))\n"
        "asyncio.run(w.setup('127.0.0.1', 0))\n"
        "r = asyncio.run(w.compute({'response': '\\\\boxed{3}', 'ground_truth': '3'}))\n"
        "assert r.failed is None and r.score == 1.0, r\n"
        "assert w._device() == 'cpu'\n"
        "print('torch' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_local_ray_cluster_settings(tmp_path, monkeypatch):
    """A cluster the driver starts: no prestarted idle workers, OpenMP threads that sleep when
    idle (unless the user chose a policy), the user's env vars kept."""
    import ray

    from roll.pipelines import base

    seen = {}
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: seen.update(kw))
    monkeypatch.setattr("roll.utils.reaper.start_reaper", lambda: None)
    monkeypatch.setattr(base, "own_worker_logs", lambda: None)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    base.init_ray(_cfg(tmp_path, "ray.runtime_env={env_vars: {FOO: bar}}"))
    assert seen["_system_config"] == {"enable_worker_prestart": False, "prestart_worker_first_driver": False}
    assert seen["runtime_env"]["env_vars"]["OMP_WAIT_POLICY"] == "PASSIVE"
    assert seen["runtime_env"]["env_vars"]["FOO"] == "bar"

    seen.clear()
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    base.init_ray(_cfg(tmp_path, "ray.address=auto"))
    assert seen["runtime_env"]["env_vars"]["OMP_WAIT_POLICY"] == "ACTIVE"
    assert "_system_config" not in seen  # joining a running cluster: its settings are its own


def test_startup_phases_are_timed(tmp_path):
    """Where the time to the first step goes: ``timing/startup/<phase>`` (the RLVR pipeline
    logs them with its first step), and the driver process's own start."""
    import psutil

    from roll.pipelines.base import BasePipeline

    pipeline = BasePipeline(_cfg(tmp_path))
    with pipeline.startup_phase("data"):
        time.sleep(0.05)
    pipeline.record_process_start()
    t = pipeline.startup_timings
    assert 0.05 <= t["timing/startup/data"] < 5
    assert 0 < t["timing/startup/process"] <= time.time() - psutil.Process().create_time() + 0.01
