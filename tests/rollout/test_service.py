"""Building the scheduler from a PipelineConfig; the blocking facade overlaps rollouts with training."""
import time

from rollout_fakes import ScriptedClient

from roll.config import PipelineConfig, build_dataclass
from roll.rollout.service import ThreadedScheduler, build_rollout_scheduler


def _config(**rollout):
    return build_dataclass(PipelineConfig, {
        "seed": 3,
        "custom_envs": {"cd": {"env_id": "rolltest/Countdown-v0", "max_turns": 3}},
        "train_env_manager": {"tags": ["cd"], "group_size": 2},
        "val_env_manager": {"tags": ["cd"], "group_size": 1, "seed_offset": 500},
        "actor_infer": {"generating_args": {"max_new_tokens": 24}},
        "rollout": rollout,
    })


def test_threaded_scheduler_keeps_rolling_out_while_the_caller_trains(tok):
    cfg = _config(mode="async", async_generation_ratio=1.0)
    client = ScriptedClient(tok, token_latency_s=0.001)
    sched = ThreadedScheduler(lambda: build_rollout_scheduler(cfg, [client], tok, use_ray=False))
    try:
        first = sched.get_batch(4)
        time.sleep(0.3)  # "training": the background loop produces the next batch meanwhile
        # requests beyond the first batch's turns were the next batch, produced ahead
        assert len(client.requests) > sum(t.num_turns for t in first.trajectories)
        with sched.weight_update(version=1):
            client.version = 1
        second = sched.get_batch(4)
        assert second.metrics["rollout/policy_version"] == 1
        assert set(second.batch["min_policy_version"].tolist()) == {0}  # made before the update
        assert len(first.trajectories) == 4 and len(second.trajectories) == 4
    finally:
        sched.close()


def test_validation_scheduler_from_config(tok):
    cfg = _config(mode="async")
    sched = ThreadedScheduler(lambda: build_rollout_scheduler(cfg, [ScriptedClient(tok)], tok, validation=True, use_ray=False))
    try:
        out = sched.get_batch(2)
        assert min(out.batch["env_seed"]) >= 503  # seed + seed_offset
    finally:
        sched.close()
