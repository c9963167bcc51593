"""RolloutScheduler: sync vs async, groups, failures, staleness, partial rollouts, filters."""
import asyncio
import time
import zlib

import pytest
import torch
from rollout_fakes import ScriptedClient

from roll.config.roles import GeneratingArgs
from roll.config.rollout import EnvConfig, EnvManagerConfig, RolloutConfig
from roll.data.trajectory import FAILURE_TYPES
from roll.rollout.scheduler import RolloutScheduler
from roll.workers.environment import EnvironmentWorker

COUNTDOWN = {"cd": EnvConfig(env_id="rolltest/Countdown-v0", max_turns=5)}


def build(tok, client, envs=COUNTDOWN, hosts=1, seed=7, **kw):
    rkw = {k: kw.pop(k) for k in list(kw) if k in RolloutConfig.__dataclass_fields__}
    if "manager_mode" in kw:
        kw["mode"] = kw.pop("manager_mode")
    mcfg = EnvManagerConfig(**{"group_size": 2, **kw})
    rcfg = RolloutConfig(**rkw)
    workers = [EnvironmentWorker(envs, mcfg, GeneratingArgs(max_new_tokens=48), tok, [client],
                                 on_weight_update=rcfg.on_weight_update) for _ in range(hosts)]
    return RolloutScheduler(envs, mcfg, rcfg, workers, pad_token_id=tok.pad_token_id, seed=seed)


def jittery(tok):
    """Latency differs per request, so per-sample completion order differs from lockstep."""
    client = ScriptedClient(tok, token_latency_s=0.0005)
    base = client.generate

    async def generate(request):
        await asyncio.sleep((zlib.crc32(request.request_id.encode()) % 7) * 0.002)
        return await base(request)

    client.generate = generate
    return client


def test_sync_and_async_ratio0_give_identical_batches(tok):
    async def run(mode):
        sched = build(tok, jittery(tok), mode=mode, async_generation_ratio=0.0, hosts=2)
        outs = [await sched.get_batch(8) for _ in range(2)]
        await sched.shutdown()
        return outs

    sync, asyn = asyncio.run(run("sync")), asyncio.run(run("async"))
    for a, b in zip(sync, asyn):
        assert a.groups == b.groups
        assert set(a.batch.tensors) == set(b.batch.tensors)
        for k in a.batch.tensors:
            assert torch.equal(a.batch.tensors[k], b.batch.tensors[k]), k
        for k in ("group_id", "episode_id", "env_seed", "num_turns"):
            if k == "episode_id":  # ids carry a launch counter; compare the group/slot part
                assert [e.split("#")[0] for e in a.batch[k]] == [e.split("#")[0] for e in b.batch[k]]
            else:
                assert list(a.batch[k]) == list(b.batch[k])
    assert sync[0].groups != sync[1].groups  # the second batch runs new seeds


def test_several_tags_with_per_tag_group_counts(tok):
    envs = {"cd": EnvConfig(env_id="rolltest/Countdown-v0", max_turns=3),
            "lake": EnvConfig(env_id="roll/FrozenLake-v0", max_turns=3)}

    async def main():
        import roll.envs  # noqa: F401
        sched = build(tok, ScriptedClient(tok), envs=envs, num_groups_partition=[3, 1])
        out = await sched.get_batch(8)
        with pytest.raises(ValueError, match="num_groups_partition"):
            await sched.get_batch(4)
        await sched.shutdown()
        return out

    out = asyncio.run(main())
    assert list(out.batch["env_tag"]).count("cd") == 6 and list(out.batch["env_tag"]).count("lake") == 2
    assert "env/cd/success" in out.metrics and "env/lake/num_turns" in out.metrics
    seeds = {}
    for g, s in zip(out.batch["group_id"], out.batch["env_seed"]):
        seeds.setdefault(g, set()).add(s)
    assert all(len(v) == 1 for v in seeds.values()) and len(seeds) == 4  # one seed per group


def test_fault_injection_env_raises_and_hangs(tok):
    envs = {"flaky": EnvConfig(env_id="rolltest/Flaky-v0", max_turns=4, step_timeout_s=0.15,
                               env_kwargs={"hang_s": 0.6, "max_len": 3})}

    async def main():
        sched = build(tok, ScriptedClient(tok), envs=envs, group_size=2, max_episode_retries=6,
                      max_group_refills=50, get_batch_timeout_s=30.0)
        outs, totals = [], {}
        for _ in range(4):
            t0 = time.monotonic()
            out = await sched.get_batch(8)
            assert time.monotonic() - t0 < 30.0
            outs.append(out)
            for k, v in out.metrics.items():
                if k.startswith("rollout/failures/"):
                    totals[k] = totals.get(k, 0) + v
        await sched.shutdown()
        return outs, totals

    outs, totals = asyncio.run(main())
    assert totals.get("rollout/failures/env_error", 0) > 0
    assert totals.get("rollout/failures/env_timeout", 0) > 0
    assert set(totals) <= {f"rollout/failures/{k}" for k in FAILURE_TYPES}
    for out in outs:
        assert len(out.trajectories) == 8 and all(t.failure is None for t in out.trajectories)
        sizes = {}
        for t in out.trajectories:
            sizes[t.group_id] = sizes.get(t.group_id, 0) + 1
        assert set(sizes.values()) == {2}  # complete groups only: no failed episode took a slot
    assert any(k.startswith("env/flaky/failures/") for out in outs for k in out.metrics)  # per-tag counts too


def test_get_batch_times_out_loudly(tok):
    class Never(ScriptedClient):
        async def generate(self, request):
            await asyncio.sleep(60)

    async def main():
        sched = build(tok, Never(tok), get_batch_timeout_s=0.3)
        with pytest.raises(TimeoutError, match="get_batch timed out"):
            await sched.get_batch(4)
        await sched.shutdown()

    asyncio.run(main())


def _train_loop(tok, client, steps, ratio, train_s, on_update="partial", batch=4, **kw):
    async def main():
        sched = build(tok, client, mode="async", async_generation_ratio=ratio, on_weight_update=on_update, **kw)
        outs = []
        for step in range(steps):
            out = await sched.get_batch(batch)
            outs.append((sched.version, out))
            await asyncio.sleep(train_s)  # training while rollouts continue in the background
            await sched.suspend()
            client.version = step + 1
            await sched.set_policy_version(step + 1)
            await sched.resume()
        await sched.shutdown()
        return outs

    return asyncio.run(main())


@pytest.mark.parametrize("ratio", [1.0, 2.0])
def test_async_batches_stay_within_the_staleness_bound(tok, ratio):
    client = ScriptedClient(tok, token_latency_s=0.002)
    envs = {"cd": EnvConfig(env_id="rolltest/Countdown-v0", max_turns=5, env_kwargs={"max_len": 5})}
    outs = _train_loop(tok, client, steps=5, ratio=ratio, train_s=0.08, envs=envs)
    saw_stale = False
    for version, out in outs:
        mins = out.batch["min_policy_version"].tolist()
        assert all(version - m <= ratio for m in mins), (version, mins)
        tv = [v for t in out.trajectories for v in t.turn_versions]
        assert all(0 <= version - v <= ratio for v in tv)
        saw_stale |= any(m < version for m in mins)
        assert out.metrics["rollout/staleness/max"] <= ratio
    assert saw_stale  # rollouts really overlapped training


def test_partial_rollout_records_the_version_of_each_turn(tok):
    # long generations (~0.1 s per turn) so weight updates land mid-turn
    client = ScriptedClient(tok, token_latency_s=0.003, length_fn=lambda p, s: 30 + s % 20)
    envs = {"cd": EnvConfig(env_id="rolltest/Countdown-v0", max_turns=5, env_kwargs={"max_len": 4})}
    outs = _train_loop(tok, client, steps=4, ratio=2.0, train_s=0.15, envs=envs)
    mixed_turns = multi_version_eps = resumed = 0
    for version, out in outs:
        for t in out.trajectories:
            assert len(t.turn_versions) == t.num_turns
            per_turn = {}
            for turn, v in zip(t.token_turns, t.token_versions):
                if turn >= 0:
                    per_turn.setdefault(turn, set()).add(v)
            assert [min(per_turn[k]) for k in sorted(per_turn)] == t.turn_versions
            assert t.turn_versions == sorted(t.turn_versions)  # versions only move forward
            mixed_turns += sum(len(v) > 1 for v in per_turn.values())
            multi_version_eps += len(set(t.turn_versions)) > 1
            resumed += t.metrics["partial_resumes"]
    assert resumed > 0 and mixed_turns > 0 and multi_version_eps > 0
    # a resumed request continues from the partial tokens: its prompt ends with them
    resumes = [r for r in client.requests if not r.request_id.endswith("/r0")]
    assert resumes and all(r.meta["policy_version"] > 0 for r in resumes)


def test_discard_mode_restarts_interrupted_episodes(tok):
    client = ScriptedClient(tok, token_latency_s=0.003, length_fn=lambda p, s: 30 + s % 20)
    outs = _train_loop(tok, client, steps=3, ratio=1.0, train_s=0.15, on_update="discard")
    restarts = sum(out.metrics.get("rollout/restarts/discarded", 0) for _, out in outs)
    assert restarts > 0
    for version, out in outs:
        for t in out.trajectories:
            assert len(set(t.token_versions) - {-1}) == 1  # one version per episode: nothing resumed
            assert t.metrics["partial_resumes"] == 0


def test_zero_variance_filter_refills_and_counts(tok):
    # the answer is valid or not depending on the sampling seed, so some groups have equal
    # returns (filtered) and others do not
    def answer(prompt_ids, seed):
        return "<answer>Up</answer>" if seed % 3 else "nonsense"

    async def main():
        sched = build(tok, ScriptedClient(tok, answer=answer), group_filter="zero_variance",
                      max_group_refills=100, group_size=4)
        out = await sched.get_batch(8)
        await sched.shutdown()
        return out

    out = asyncio.run(main())
    assert out.metrics["rollout/groups_filtered"] > 0
    scores = {}
    for g, s in zip(out.batch["group_id"], out.batch["scores"].tolist()):
        scores.setdefault(g, []).append(s)
    assert len(scores) == 2 and all(max(v) > min(v) for v in scores.values())


def test_redundant_groups_are_discarded_at_ratio_zero(tok):
    async def main():
        sched = build(tok, ScriptedClient(tok, token_latency_s=0.001), redundancy=1.0)
        out = await sched.get_batch(4)  # 2 groups wanted, 4 started; the first 2 to finish are kept
        await asyncio.sleep(0.05)
        running = len(sched._tasks)
        await sched.shutdown()
        return out, running

    out, running = asyncio.run(main())
    assert len(out.groups) == 2 and running == 0  # nothing keeps running at ratio 0
    assert out.metrics["rollout/redundant_groups_discarded"] == 2


def test_validation_scheduler_repeats_its_seeds(tok):
    async def main():
        mcfg = EnvManagerConfig(group_size=1, seed_offset=10_000)
        client = ScriptedClient(tok)
        worker = EnvironmentWorker(COUNTDOWN, mcfg, GeneratingArgs(max_new_tokens=32), tok, [client])
        val = RolloutScheduler(COUNTDOWN, mcfg, RolloutConfig(mode="sync", async_generation_ratio=3), [worker],
                               pad_token_id=tok.pad_token_id, seed=7, validation=True)
        a, b = await val.get_batch(3), await val.get_batch(3)
        await val.shutdown()
        return a, b

    a, b = asyncio.run(main())
    assert list(a.batch["env_seed"]) == list(b.batch["env_seed"])
    assert min(a.batch["env_seed"]) >= 10_000
    assert torch.equal(a.batch["input_ids"], b.batch["input_ids"])


def test_bad_batch_sizes_are_errors(tok):
    async def main():
        sched = build(tok, ScriptedClient(tok))
        with pytest.raises(ValueError, match="multiple of group_size"):
            await sched.get_batch(3)
        await sched.shutdown()

    asyncio.run(main())


def test_step_mode_batches_hold_one_sample_per_turn_of_complete_groups(tok):
    async def main():
        sched = build(tok, ScriptedClient(tok), mode="async", manager_mode="step", group_size=2, history_window=2)
        out = await sched.get_batch(4)
        await sched.shutdown()
        return out

    out = asyncio.run(main())
    episodes = {}
    for t in out.trajectories:
        episodes.setdefault(t.episode_id, []).append(t.step_index)
    assert len(episodes) == 4
    assert all(sorted(v) == list(range(len(v))) for v in episodes.values())
    assert len(out.trajectories) == sum(len(v) for v in episodes.values())
    assert all(t.state_key for t in out.trajectories)
    assert out.batch["response_mask"].sum(dim=1).gt(0).all()


def test_wait_mode_finishes_in_flight_turns_under_the_old_version(tok):
    client = ScriptedClient(tok, token_latency_s=0.003, length_fn=lambda p, s: 30)
    outs = _train_loop(tok, client, steps=3, ratio=1.0, train_s=0.1, on_update="wait")
    for version, out in outs:
        for t in out.trajectories:
            assert t.metrics["partial_resumes"] == 0
            per_turn = {}
            for turn, v in zip(t.token_turns, t.token_versions):
                if turn >= 0:
                    per_turn.setdefault(turn, set()).add(v)
            assert all(len(v) == 1 for v in per_turn.values())  # no turn spans two versions


def test_lockstep_calls_each_host_once_per_phase(tok):
    """Sync mode: every phase of a lockstep round is one call per environment worker carrying
    all of its episodes, not one call per episode."""
    calls: list[tuple[int, str, int]] = []

    class Counting(EnvironmentWorker):
        def __init__(self, k, *a, **kw):
            super().__init__(*a, **kw)
            self.k = k

        def _count(name):
            async def method(self, items):
                calls.append((self.k, name, len(items)))
                return await getattr(EnvironmentWorker, name)(self, items)
            return method

        start_episodes = _count("start_episodes")
        generate_turns = _count("generate_turns")
        step_envs = _count("step_envs")
        finish_episodes = _count("finish_episodes")

    mcfg = EnvManagerConfig(group_size=2)
    client = ScriptedClient(tok)
    workers = [Counting(k, COUNTDOWN, mcfg, GeneratingArgs(max_new_tokens=48), tok, [client]) for k in range(2)]
    sched = RolloutScheduler(COUNTDOWN, mcfg, RolloutConfig(mode="sync"), workers, pad_token_id=tok.pad_token_id, seed=7)

    async def main():
        out = await sched.get_batch(8)
        await sched.shutdown()
        return out

    out = asyncio.run(main())
    assert len(out.trajectories) == 8
    starts = [(k, n) for k, m, n in calls if m == "start_episodes"]
    assert sorted(starts) == [(0, 4), (1, 4)]  # 8 episodes, least-loaded hosts: 4 each, one call each
    assert sorted((k, n) for k, m, n in calls if m == "finish_episodes") == [(0, 4), (1, 4)]
    turns = max(t.num_turns for t in out.trajectories)
    for k in (0, 1):
        gens = [n for kk, m, n in calls if kk == k and m == "generate_turns"]
        assert 1 <= len(gens) <= turns and gens[0] == 4  # one call per turn round, all live episodes
        assert [n for kk, m, n in calls if kk == k and m == "step_envs"] == gens
