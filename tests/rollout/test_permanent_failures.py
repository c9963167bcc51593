"""Permanent vs transient env failures: the run stops with one message naming the env, the
first traceback in the run's error log; transient failures are still retried. Every case runs
in both scheduling modes (lockstep and per-sample), which classify through one helper."""
from __future__ import annotations

import asyncio
from collections import Counter

import gymnasium
import pytest
from gymnasium import spaces
from rollout_fakes import ScriptedClient

from roll.config.roles import GeneratingArgs
from roll.config.rollout import EnvConfig, EnvManagerConfig, RolloutConfig
from roll.errors import RunFailedError
from roll.rollout.failures import (EpisodeVerdict, ErrorLog, FailureSignature, check_step, classify_episode)
from roll.rollout import scheduler as scheduler_module
from roll.rollout.scheduler import RolloutScheduler
from roll.workers.environment import EnvironmentWorker

MODES = ["sync", "async"]


class _TextEnv(gymnasium.Env):
    """Five turns of text; subclasses break one thing."""

    metadata = {"render_modes": []}

    def __init__(self):
        self.observation_space = spaces.Text(max_length=1000)
        self.action_space = spaces.Text(max_length=1000)
        self.turn = 0
        self.seed_ = 0

    def reset(self, seed=None, options=None):
        self.turn, self.seed_ = 0, int(seed or 0)
        return "start", {"instruction": "Say anything."}

    def step(self, action):
        self.turn += 1
        return f"turn {self.turn}", 0.5, self.turn >= 5, False, {}


class BrokenConstructorEnv(_TextEnv):
    def __init__(self):
        raise FileNotFoundError("levels file /no/such/levels.txt")


class RaisesOnTurn3Env(_TextEnv):
    def step(self, action):
        if self.turn == 2:
            raise KeyError("board")  # a bug: every episode hits it on turn 3
        return super().step(action)


class IntObservationEnv(_TextEnv):
    def step(self, action):
        obs, *rest = super().step(action)
        return 42, *rest


class OldGymApiEnv(_TextEnv):
    """step() in the old gym API: (obs, reward, done, info)."""

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward, terminated or truncated, info


class NanRewardEnv(_TextEnv):
    def step(self, action):
        obs, _, *rest = super().step(action)
        return obs, float("nan"), *rest


class NoneRewardEnv(_TextEnv):
    def step(self, action):
        obs, _, *rest = super().step(action)
        return obs, None, *rest


class ListInfoEnv(_TextEnv):
    def reset(self, seed=None, options=None):
        obs, _ = super().reset(seed=seed, options=options)
        return obs, ["instruction"]


class FailsOncePerSeedEnv(_TextEnv):
    """Raises on the first attempt at each seed only: a transient failure, retried."""

    failed_seeds: set[int] = set()

    def step(self, action):
        if self.turn == 1 and self.seed_ not in self.failed_seeds:
            self.failed_seeds.add(self.seed_)
            raise ConnectionError("search server reset the connection")
        return super().step(action)


for _name, _cls in [("BrokenConstructor", BrokenConstructorEnv), ("RaisesOnTurn3", RaisesOnTurn3Env),
                    ("IntObservation", IntObservationEnv), ("FailsOncePerSeed", FailsOncePerSeedEnv),
                    ("OldGymApi", OldGymApiEnv), ("NanReward", NanRewardEnv), ("NoneReward", NoneRewardEnv),
                    ("ListInfo", ListInfoEnv), ("NoSuccessKey", _TextEnv)]:
    if f"rolltest/{_name}-v0" not in gymnasium.registry:
        gymnasium.register(id=f"rolltest/{_name}-v0", entry_point=_cls, disable_env_checker=True)


def build(tok, env_id, mode, tmp_path, **kw):
    envs = {"broken": EnvConfig(env_id=env_id, max_turns=5)}
    mcfg = EnvManagerConfig(group_size=2, **kw)
    rcfg = RolloutConfig(mode=mode, get_batch_timeout_s=30.0)
    worker = EnvironmentWorker(envs, mcfg, GeneratingArgs(max_new_tokens=16), tok, [ScriptedClient(tok)])
    return RolloutScheduler(envs, mcfg, rcfg, [worker], pad_token_id=tok.pad_token_id, seed=3,
                            error_log=ErrorLog(tmp_path / "env_errors.log"))


def expect_run_failure(tok, env_id, mode, tmp_path):
    async def main():
        sched = build(tok, env_id, mode, tmp_path)
        try:
            with pytest.raises(RunFailedError) as info:
                await sched.get_batch(4)
        finally:
            await sched.shutdown()
        return str(info.value), sched

    msg, sched = asyncio.run(main())
    assert "\n" not in msg  # one line for the CLI
    assert "'broken'" in msg and repr(env_id) in msg
    log = tmp_path / "env_errors.log"
    return msg, log.read_text() if log.exists() else ""


@pytest.mark.parametrize("mode", MODES)
def test_constructor_error_stops_the_run_with_its_traceback(tok, mode, tmp_path):
    msg, log = expect_run_failure(tok, "rolltest/BrokenConstructor-v0", mode, tmp_path)
    assert "FileNotFoundError: levels file /no/such/levels.txt" in msg
    assert str(tmp_path / "env_errors.log") in msg
    assert f'File "{__file__}", line' in log and 'raise FileNotFoundError("levels file' in log


@pytest.mark.parametrize("mode", MODES)
def test_unknown_env_id_is_permanent_not_retried(tok, mode, tmp_path):
    msg, log = expect_run_failure(tok, "rolltest/NoSuchEnv-v0", mode, tmp_path)
    assert "NoSuchEnv" in msg and "fails permanently" in msg
    assert "env_error:" in log and "/a1#" not in log  # stopped at the first failure: nothing retried


@pytest.mark.parametrize("mode", MODES)
def test_step_raising_on_turn_3_from_the_same_seed_twice_is_permanent(tok, mode, tmp_path):
    msg, log = expect_run_failure(tok, "rolltest/RaisesOnTurn3-v0", mode, tmp_path)
    assert "KeyError: 'board'" in msg and "at turn 3 twice from env seed" in msg
    assert f'File "{__file__}", line' in log and 'raise KeyError("board")' in log
    assert log.count("Traceback") == 1  # the full traceback once, then one line per failure
    assert log.count("KeyError: 'board'") >= 2


@pytest.mark.parametrize("mode", MODES)
def test_non_text_observation_is_an_env_error_naming_the_env(tok, mode, tmp_path):
    msg, _ = expect_run_failure(tok, "rolltest/IntObservation-v0", mode, tmp_path)
    assert "returned a int observation from step()" in msg and "must be text" in msg


API_BREAKS = {
    "OldGymApi": "step() returned a tuple of 4, expected (observation, reward, terminated, truncated, info) "
                 "(the old gym API's obs, reward, done, info",
    "NanReward": "step() returned a reward of nan, expected a finite number",
    "NoneReward": "step() returned a reward of type NoneType ('None'), expected a number",
    "ListInfo": "reset() returned a list as info, expected a dict",
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(API_BREAKS))
def test_an_env_breaking_the_gymnasium_api_stops_the_run_naming_it(tok, name, mode, tmp_path):
    msg, log = expect_run_failure(tok, f"rolltest/{name}-v0", mode, tmp_path)
    assert f"env 'rolltest/{name}-v0' (tag 'broken'): {API_BREAKS[name]}" in msg, msg
    assert "fails permanently" in msg and "/a1#" not in log  # the same every time: not retried


@pytest.mark.parametrize("mode", MODES)
def test_transient_failures_are_retried_counted_and_logged(tok, mode, tmp_path):
    FailsOncePerSeedEnv.failed_seeds.clear()

    async def main():
        sched = build(tok, "rolltest/FailsOncePerSeed-v0", mode, tmp_path)
        out = await sched.get_batch(4)
        await sched.shutdown()
        return out

    out = asyncio.run(main())
    assert len(out.trajectories) == 4 and all(t.failure is None for t in out.trajectories)
    assert out.metrics["rollout/failures/env_error"] == 2  # one per seed (2 groups)
    assert out.metrics["rollout/episode_retries"] == 2
    assert out.metrics["rollout/failed_episode_share"] == pytest.approx(2 / 6)
    assert sum(out.failure_causes.values()) == 2
    assert (tmp_path / "env_errors.log").read_text().count("ConnectionError") >= 2


@pytest.mark.parametrize("mode", MODES)
def test_an_env_that_never_reports_success_is_named_once(tok, mode, tmp_path, log_calls):
    # not a failure (the rewards still train), but its success rate would read 0 whatever happened
    async def main(env_id):
        sched = build(tok, env_id, mode, tmp_path)
        try:
            return [await sched.get_batch(4) for _ in range(2)]
        finally:
            await sched.shutdown()

    calls = log_calls(scheduler_module.logger)
    batches = asyncio.run(main("rolltest/NoSuccessKey-v0"))
    asyncio.run(main("rolltest/Countdown-v0"))  # reports success: no warning
    assert all(b.metrics["env/broken/success"] == 0.0 for b in batches)
    warned = [m for level, m in calls if level == "WARNING" and "info['success']" in m]
    assert warned == ["env broken (rolltest/NoSuccessKey-v0): none of its 4 episodes reported info['success'], so its "
                      "success rate reads 0 whatever the episodes did; set info['success'] (a bool) in step(), at "
                      "least on the step that ends an episode (docs/adding_an_env.md)"], warned


def test_classification_table():
    sig = FailureSignature("env_error", "KeyError: 'board'", 2)
    other = FailureSignature("env_error", "KeyError: 'board'", 3)
    assert classify_episode(None, False, None, None, 0, 3) == EpisodeVerdict.DONE
    assert classify_episode("cancelled", False, None, None, 0, 3) == EpisodeVerdict.IGNORED
    assert classify_episode("stale", False, None, None, 0, 3) == EpisodeVerdict.RESTART
    assert classify_episode("env_error", True, sig, None, 1, 3) == EpisodeVerdict.PERMANENT
    assert classify_episode("env_error", False, sig, None, 1, 3) == EpisodeVerdict.RETRY
    assert classify_episode("env_error", False, sig, sig, 2, 3) == EpisodeVerdict.PERMANENT
    assert classify_episode("env_error", False, sig, other, 2, 3) == EpisodeVerdict.RETRY  # another turn
    assert classify_episode("env_error", False, sig, other, 4, 3) == EpisodeVerdict.DROP
    timeout = FailureSignature("env_timeout", "env.step took longer than 1s", 2)
    assert classify_episode("env_timeout", False, timeout, timeout, 2, 3) == EpisodeVerdict.RETRY  # transient


def test_check_step_limits(tmp_path):
    log = ErrorLog(tmp_path / "env_errors.log")
    log.record("episode x", "env_error", "ValueError: bad", "Traceback ...\n  File \"env.py\", line 3\n")
    check_step(0, what="episodes", attempted=8, failed=8, trainable=1, limit=1.0)
    check_step(0, what="episodes", attempted=8, failed=4, trainable=4, limit=0.5)
    with pytest.raises(RunFailedError, match=r"step 1: no trainable sample \(8 of 8 episodes failed\); most "
                                             r"common: 8x env_error: ValueError: bad; failures and tracebacks in .*env_errors.log"):
        check_step(0, what="episodes", attempted=8, failed=8, trainable=0, limit=1.0,
                   causes=Counter({"env_error: ValueError: bad": 8}), log=log)
    with pytest.raises(RunFailedError, match=r"step 3: 5 of 8 responses failed \(62%\), more than rollout.max_failed_share=0.5"):
        check_step(2, what="responses", attempted=8, failed=5, trainable=3, limit=0.5)
    with pytest.raises(RunFailedError, match="0 of 4 episodes failed; 2 groups filtered"):
        check_step(0, what="episodes", attempted=4, failed=0, trainable=0, limit=1.0, note="2 groups filtered")


class AlwaysHangsEnv(_TextEnv):
    def __init__(self, **kwargs):  # takes the Sokoban config's env_kwargs
        super().__init__()

    def step(self, action):
        import time

        time.sleep(0.5)
        return super().step(action)


if "rolltest/AlwaysHangs-v0" not in gymnasium.registry:
    gymnasium.register(id="rolltest/AlwaysHangs-v0", entry_point=AlwaysHangsEnv, disable_env_checker=True)


def test_agentic_step_with_no_trainable_sample_stops_the_run(tok, tmp_path):
    """Only transient failures (every step times out): retried, groups dropped and refilled,
    then the step has nothing to train on, which stops the run instead of skipping the step."""
    from pathlib import Path

    from roll.config.loader import load_config
    from roll.pipelines.agentic import AgenticPipeline
    from roll.rollout.service import ThreadedScheduler, build_rollout_scheduler

    repo = Path(__file__).resolve().parents[2]
    cfg = load_config(repo / "configs/agentic/sokoban_cpu.yaml", [
        f"output_dir={tmp_path}", "custom_envs.SimpleSokoban.env_id=rolltest/AlwaysHangs-v0",
        "custom_envs.SimpleSokoban.step_timeout_s=0.05",
        "train_env_manager.max_episode_retries=1", "train_env_manager.max_group_refills=1"])
    pipeline = AgenticPipeline(cfg)
    pipeline._make_tracker()
    pipeline.train_scheduler = ThreadedScheduler(
        lambda: build_rollout_scheduler(cfg, [ScriptedClient(tok)], tok, use_ray=False))
    try:
        rollout = pipeline.collect_rollouts(0)
        metrics = dict(rollout.metrics)
        with pytest.raises(RunFailedError) as info:
            pipeline.check_rollout(0, rollout, metrics)
    finally:
        pipeline.train_scheduler.close()
        pipeline.tracker.finish()
    msg = str(info.value)
    assert msg.startswith("step 1: no trainable sample (") and "episodes failed" in msg
    assert "env_timeout: env.step took longer than 0.05s" in msg
    assert f"failures and tracebacks in {tmp_path / 'env_errors.log'}" in msg
    assert metrics["rollout/failed_episode_share"] == 1.0 and metrics["rollout/empty_batch"] == 1.0
    assert (tmp_path / "env_errors.log").read_text().count("env_timeout") == metrics["rollout/episodes_failed"]
