"""EpisodeGroup, the group state machine both scheduling modes share: every transition of its
table (roll/rollout/groups.py), and identical group outcomes from lockstep and per-sample
scheduling on the same scripted episode outcomes."""
from __future__ import annotations

import asyncio

import pytest
from rollout_fakes import FailingClient

from roll.config.roles import GeneratingArgs
from roll.config.rollout import EnvConfig, EnvManagerConfig, RolloutConfig
from roll.data.trajectory import Trajectory
from roll.rollout.failures import EpisodeVerdict
from roll.rollout.groups import EpisodeGroup
from roll.rollout.scheduler import RolloutScheduler
from roll.workers.environment import EnvironmentWorker


def ok(ret: float = 1.0) -> list[Trajectory]:
    return [Trajectory(input_ids=[1, 2], loss_mask=[0, 1], logprobs=[0.0, -1.0], token_turns=[-1, 0],
                       token_versions=[-1, 0], turn_versions=[0], episode_return=ret, episode_id=f"e{ret}")]


def bad(failure: str, detail: str = "boom", turn: int = 0, permanent: bool = False) -> list[Trajectory]:
    return [Trajectory(failure=failure, failure_detail=detail, num_turns=turn, failure_permanent=permanent)]


def group(size: int = 2, max_retries: int = 1, accept=None) -> EpisodeGroup:
    return EpisodeGroup("t", 0, 5, size, max_retries, accept)


def test_usable_episodes_fill_slots_until_the_group_is_ready():
    g = group(size=3)
    assert g.record(1, ok(1.0)) == EpisodeVerdict.DONE
    assert g.record(0, ok(0.0)) == EpisodeVerdict.DONE and not g.complete
    assert g.record(2, ok(2.0)) == EpisodeVerdict.READY and g.complete and g.finished
    assert [t.episode_return for t in g.trajectories()] == [0.0, 1.0, 2.0]  # slot order
    assert g.record(0, ok()) == EpisodeVerdict.IGNORED  # a settled group takes nothing more


@pytest.mark.parametrize("keep", [True, False])
def test_the_filter_decides_between_ready_and_filtered(keep):
    seen = []
    g = group(accept=lambda trajs: seen.append(len(trajs)) or keep)
    g.record(0, ok())
    assert seen == []  # the filter sees complete groups only
    assert g.record(1, ok()) == (EpisodeVerdict.READY if keep else EpisodeVerdict.FILTERED)
    assert seen == [2] and g.finished and not g.dropped


def test_cancelled_episodes_change_nothing():
    g = group()
    assert g.record(0, bad("cancelled")) == EpisodeVerdict.IGNORED
    assert g.attempts == {} and g.failures == {} and not g.done


@pytest.mark.parametrize("kind", ["stale", "discarded"])
def test_stale_and_discarded_restart_without_using_the_budget(kind):
    g = group(max_retries=0)
    for attempt in (1, 2, 3):
        assert g.record(0, bad(kind)) == EpisodeVerdict.RESTART
        assert g.attempts[0] == attempt
    assert g.failures == {} and not g.dropped


@pytest.mark.parametrize("kind", ["env_timeout", "worker_died", "inference_error", "context_overflow", "env_error"])
def test_transient_failures_retry_until_the_budget_then_drop(kind):
    g = group(max_retries=2)
    assert g.record(0, bad(kind, "first")) == EpisodeVerdict.RETRY
    assert g.record(0, bad(kind, "second")) == EpisodeVerdict.RETRY
    assert (g.attempts[0], g.failures[0]) == (2, 2)
    assert g.record(1, bad(kind, "other slot")) == EpisodeVerdict.RETRY  # budgets are per slot
    assert g.record(0, bad(kind, "third")) == EpisodeVerdict.DROP and g.dropped
    assert g.record(1, ok()) == EpisodeVerdict.IGNORED


def test_the_same_env_error_twice_from_a_slot_is_permanent():
    g = group(max_retries=5)
    assert g.record(0, bad("env_error", "KeyError: board", turn=2)) == EpisodeVerdict.RETRY
    assert g.record(1, bad("env_error", "KeyError: board", turn=2)) == EpisodeVerdict.RETRY  # another slot
    assert g.record(0, bad("env_error", "KeyError: board", turn=2)) == EpisodeVerdict.PERMANENT and g.dropped


def test_a_timeout_repeating_is_not_permanent_and_the_workers_verdict_is():
    g = group(max_retries=5)
    assert g.record(0, bad("env_timeout", "slow", turn=1)) == EpisodeVerdict.RETRY
    assert g.record(0, bad("env_timeout", "slow", turn=1)) == EpisodeVerdict.RETRY
    assert g.record(1, bad("env_error", "cannot create", permanent=True)) == EpisodeVerdict.PERMANENT


def test_a_group_dropped_from_outside_ignores_late_episodes():
    g = group()
    g.record(0, ok())
    g.drop()
    assert g.record(1, ok()) == EpisodeVerdict.IGNORED and not g.complete


# ---- both scheduling modes on the same scripted outcomes ----------------------------------------
COUNTDOWN = {"cd": EnvConfig(env_id="rolltest/Countdown-v0", max_turns=5)}
SCRIPT = {
    ("cd/0", 0, 0),                  # retried once, then done
    ("cd/1", 1, 0), ("cd/1", 1, 1),  # the budget of 1 retry is exhausted: cd/1 dropped, refilled
    ("cd/2", 0, 0), ("cd/2", 1, 0),  # both slots retried
    ("cd/5", 1, 0),                  # in the second batch: retried
}
MODES = ["sync", "async"]


def _answer(prompt_ids, seed):
    return "<answer>Up</answer>" if seed % 3 else "nonsense"  # returns differ by sampling seed


async def _batches(tok, mode: str, group_filter: str = "") -> list:
    mcfg = EnvManagerConfig(group_size=2, max_episode_retries=1, max_group_refills=20, group_filter=group_filter)
    rcfg = RolloutConfig(mode=mode, async_generation_ratio=0.0, get_batch_timeout_s=60.0)
    client = FailingClient(tok, SCRIPT, answer=_answer)
    workers = [EnvironmentWorker(COUNTDOWN, mcfg, GeneratingArgs(max_new_tokens=16), tok, [client]) for _ in range(2)]
    sched = RolloutScheduler(COUNTDOWN, mcfg, rcfg, workers, pad_token_id=tok.pad_token_id, seed=11)
    try:
        return [await sched.get_batch(8) for _ in range(2)]
    finally:
        await sched.shutdown()


OUTCOME_KEYS = ("rollout/groups", "rollout/groups_dropped", "rollout/groups_filtered", "rollout/episode_retries",
                "rollout/failures/inference_error", "rollout/short_batch")


@pytest.mark.parametrize("group_filter", ["", "zero_variance"])
def test_lockstep_and_per_sample_give_identical_group_outcomes(tok, group_filter):
    outcomes = {}
    for mode in MODES:
        outs = asyncio.run(_batches(tok, mode, group_filter))
        outcomes[mode] = [(out.groups, {k: out.metrics.get(k, 0.0) for k in OUTCOME_KEYS},
                           [e.split("#")[0] for e in out.batch["episode_id"]]) for out in outs]
    assert outcomes["sync"] == outcomes["async"]
    first_groups, first, _ = outcomes["sync"][0]
    assert "cd/1" not in first_groups and first["rollout/groups_dropped"] == 1 and len(first_groups) == 4
    assert sum(o[1]["rollout/failures/inference_error"] for o in outcomes["sync"]) == len(SCRIPT)
    if group_filter:
        assert sum(o[1]["rollout/groups_filtered"] for o in outcomes["sync"]) > 0
    else:  # cd/0 and cd/2 (x2) retried, cd/1 retried once then dropped; cd/5 is in the second batch
        assert (first["rollout/episode_retries"], first["rollout/failures/inference_error"]) == (4, 5)
