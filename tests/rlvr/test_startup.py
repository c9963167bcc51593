"""Start-up and footprint of an RLVR run: roles built at once on CPU, prompts loaded while Ray
starts, reward workers without torch, a local Ray cluster without idle prestarted workers,
autoscaler or log monitor, or spinning OpenMP threads."""
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
    pipeline.record_startup_total()
    t = pipeline.startup_timings
    assert 0.05 <= t["timing/startup/data"] < 5
    assert 0 < t["timing/startup/process"] <= time.time() - psutil.Process().create_time() + 0.01
    assert t["timing/startup/process"] <= t["timing/startup/total"] <= time.time() - psutil.Process().create_time() + 0.01


def test_lean_local_node_skips_the_monitors_only_while_ray_starts():
    """The Node class ``ray.init`` builds a local cluster with goes without the autoscaler
    monitor and (unless verbose) the log monitor; outside ``init_ray`` Ray's class is back."""
    from ray._private import node as ray_node

    from roll.pipelines.base import _lean_local_node

    original = ray_node.Node
    with _lean_local_node(log_monitor=False):
        lean = ray_node.Node
        assert lean is not original and issubclass(lean, original)
        assert lean.start_monitor(object()) is None and lean.start_log_monitor(object()) is None
        assert lean.start_api_server is original.start_api_server  # the dashboard agent needs it
    assert ray_node.Node is original
    with _lean_local_node(log_monitor=True):  # --verbose: worker output reaches the console
        assert ray_node.Node.start_log_monitor is original.start_log_monitor
        assert ray_node.Node.start_monitor is not original.start_monitor
    assert ray_node.Node is original


@pytest.mark.integration
def test_local_cluster_runs_without_monitor_processes(tmp_path):
    """A cluster the driver starts: its Python helper processes are the API server and the
    raylet's agents, no autoscaler monitor or log monitor (each ~45-50 MB and a second of CPU
    at start), and it still runs an actor."""
    code = (
        "import sys, psutil, ray\n"
        "from roll.config import load_config\n"
        "from roll.pipelines.base import init_ray\n"
        f"init_ray(load_config('configs/rlvr/multi_domain_cpu.yaml', ['output_dir={tmp_path}']))\n"
        "@ray.remote(num_cpus=0)\n"
        "class A:\n"
        "    def pid(self):\n"
        "        import os; return os.getpid()\n"
        "assert ray.get(A.remote().pid.remote()) > 0\n"
        "names = [' '.join(p.cmdline()) for p in psutil.Process().children(recursive=True)]\n"
        "ray.shutdown()\n"
        "print('|'.join(names))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    names = out.stdout.strip().splitlines()[-1]
    assert "gcs_server" in names and "raylet" in names and "dashboard.py" in names
    assert "monitor.py" not in names.replace("log_monitor.py", "")
    assert "log_monitor.py" not in names


def test_rlvr_loads_its_data_while_ray_starts(tmp_path, monkeypatch):
    """The prompts (tokenizer, chat templates) load in a thread while the local cluster starts:
    each side stands in with a wait for the other (one after the other, the barrier times out)."""
    import roll.pipelines.rlvr as rlvr

    barrier = threading.Barrier(2, timeout=60)
    load_data, waited = rlvr.RLVRPipeline._load_data, []

    def load_after_meeting(self):
        waited.append(barrier.wait())
        return load_data(self)

    class WorkersNotBuilt(Exception):
        pass

    def no_policy(*args, **kwargs):
        raise WorkersNotBuilt

    monkeypatch.setattr(rlvr.RLVRPipeline, "_load_data", load_after_meeting)
    monkeypatch.setattr(rlvr.RLVRPipeline, "make_pool", lambda self: barrier.wait())
    monkeypatch.setattr(rlvr.RLVRPipeline, "_make_reward_clusters", lambda self: {})
    monkeypatch.setattr(rlvr, "PolicyTrainer", no_policy)
    pipeline = rlvr.RLVRPipeline(_cfg(tmp_path))
    with pytest.raises(WorkersNotBuilt):
        pipeline.setup()
    assert waited and pipeline.prompts and pipeline.tag_to_reward
    assert {"timing/startup/process", "timing/startup/data", "timing/startup/ray"} <= set(pipeline.startup_timings)


def test_rlvr_data_error_is_raised_after_ray_started(tmp_path, monkeypatch):
    """A data problem found while the cluster starts is still the run's error (the pipeline's
    shutdown then stops what started)."""
    import roll.pipelines.rlvr as rlvr
    from roll.config.validate import ConfigError

    started = []
    monkeypatch.setattr(rlvr.RLVRPipeline, "make_pool", lambda self: started.append(True))
    pipeline = rlvr.RLVRPipeline(_cfg(tmp_path, "data.max_prompt_length=1"))
    with pytest.raises(ConfigError, match="max_prompt_length=1"):
        pipeline.setup()
    assert started == [True]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a thread's own nice value is Linux's")
def test_lower_thread_priority_lowers_only_the_calling_thread():
    """The driver work that overlaps the cluster's start yields the CPU to Ray's processes on a
    busy machine; the rest of the driver keeps its priority."""
    import os

    from roll.pipelines.base import lower_thread_priority

    main = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    seen = []

    def work():
        lower_thread_priority()
        seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert seen == [max(10, main)]
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == main
