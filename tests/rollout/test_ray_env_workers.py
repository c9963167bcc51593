"""Environment workers as Ray actors: episodes over a Ray inference actor, and a worker death."""
import asyncio
import time

import pytest
import rollout_fakes

from roll.config.roles import GeneratingArgs
from roll.config.rollout import EnvConfig, EnvManagerConfig, RolloutConfig
from roll.rollout.scheduler import RolloutScheduler
from roll.workers.environment import create_env_workers

pytestmark = pytest.mark.integration


def test_ray_env_workers_survive_a_dead_worker(ray_cluster, tok, tiny_model_dir):
    ray = ray_cluster
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(rollout_fakes)  # test-only module, unknown to Ray workers
    envs = {"cd": EnvConfig(env_id="rolltest/Countdown-v0", max_turns=4)}
    mcfg = EnvManagerConfig(group_size=2, max_episode_retries=3, num_env_workers=2, num_cpus_per_env_worker=0)
    infer = ray.remote(rollout_fakes.ScriptedClient).options(num_cpus=0, max_concurrency=1000).remote(
        tok, token_latency_s=0.004, length_fn=lambda p, s: 20)
    cluster = create_env_workers("env.train", mcfg, env_configs=envs, manager_config=mcfg,
                                 generating_args=GeneratingArgs(max_new_tokens=32), tokenizer=tiny_model_dir,
                                 inference_workers=[infer], setup=rollout_fakes.register_test_envs)
    hosts = cluster.workers
    # the configured restart budget and concurrency reach the actors through the Cluster
    assert cluster.max_restarts == mcfg.max_worker_restarts and cluster.world_size == 2

    async def main():
        sched = RolloutScheduler(envs, mcfg, RolloutConfig(mode="async", get_batch_timeout_s=60), hosts,
                                 pad_token_id=tok.pad_token_id)
        first = await sched.get_batch(8)
        task = asyncio.create_task(sched.get_batch(8))
        await asyncio.sleep(0.15)
        ray.kill(hosts[0])  # an env worker dies mid-batch
        second = await task
        third = await sched.get_batch(4)
        await sched.shutdown()
        return first, second, third

    t0 = time.monotonic()
    try:
        first, second, third = asyncio.run(main())
    finally:
        cluster.shutdown()
    assert time.monotonic() - t0 < 60
    for out in (first, second, third):
        assert all(t.failure is None for t in out.trajectories)
    assert len(first.trajectories) == 8 and len(second.trajectories) == 8 and len(third.trajectories) == 4
    assert second.metrics.get("rollout/failures/worker_died", 0) > 0
