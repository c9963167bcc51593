"""Reward workers on Ray: routing by tag, and faults (a reward that raises, one that hangs, a
worker that dies) become failed, counted samples while the rest are scored."""
import asyncio
import os
import time

import pytest

from roll.config.roles import WorkerConfig
from roll.config.schema import RewardConfig
from roll.distributed.cluster import Cluster
from roll.rewards.base import RewardOutput
from roll.workers.reward import RewardClient, RewardWorker, score_sample


def test_score_sample_converts_exceptions_and_bad_outputs():
    ok = score_sample(lambda s, **f: RewardOutput(0.5, False, {"x": 1}), {}, {})
    assert ok.failed is None and ok.score == 0.5 and ok.components == {"x": 1.0}
    err = score_sample(lambda s, **f: 1 / 0, {}, {})
    assert err.failed == "error" and err.error.startswith("ZeroDivisionError")
    assert score_sample(lambda s, **f: 1.0, {}, {}).error.startswith("TypeError")
    assert score_sample(lambda s, **f: RewardOutput(float("nan")), {}, {}).failed == "error"
    inf = score_sample(lambda s, **f: RewardOutput(float("-inf")), {}, {})  # would make the group's advantages NaN
    assert inf.failed == "error" and "score of -inf, expected a finite number" in inf.error


def _cluster(name, rc, fn=None):
    wc = WorkerConfig(world_size=rc.world_size, num_cpus_per_worker=0.01, max_concurrency=32,
                      call_timeout_s=rc.timeout_s + 30, max_restarts=-1)
    return Cluster(f"reward.{name}", RewardWorker, wc, None, worker_kwargs={"reward_config": rc, "reward_fn": fn})


@pytest.mark.integration
def test_faulty_rewards_fail_counted_and_others_score(ray_cluster):
    # defined inside the test so Ray ships them by value to the worker processes
    def faulty(sample, **fields):
        r = sample["response"]
        if r == "raise":
            raise RuntimeError("verifier crashed")
        if r == "hang":
            time.sleep(30)
        if r == "die":
            os._exit(1)
        return RewardOutput(float(r == "good"), r == "good")

    rc = RewardConfig(reward_fn="faulty", tags=["t"], timeout_s=1.0, max_hung_calls=2, max_concurrency=8)
    math_rc = RewardConfig(reward_fn="math_rule", tags=["math"])
    clusters = {"faulty": _cluster("faulty", rc, faulty), "math": _cluster("math", math_rc)}
    try:
        client = RewardClient(clusters, {"t": "faulty", "math": "math"}, {"faulty": rc, "math": math_rc})

        async def run(items):
            return await asyncio.gather(*(client.score(tag, {"id": i, "response": r, "ground_truth": "4"})
                                          for i, (tag, r) in enumerate(items)))

        t0 = time.monotonic()
        items = [("t", "good"), ("t", "bad"), ("t", "raise"), ("t", "hang"), ("t", "hang"), ("math", "\\boxed{4}")]
        results = asyncio.run(run(items))
        assert time.monotonic() - t0 < 20  # the hung calls did not hold the batch for 30 s
        assert [r.failed for r in results] == [None, None, "error", "timeout", "timeout", None]
        assert [r.score for r in results[:2]] == [1.0, 0.0] and results[5].score == 1.0
        m = client.metrics()
        assert m["reward/t/failed"] == 3 and m["reward/t/failed_timeout"] == 2 and m["reward/t/failed_error"] == 1
        assert m["reward/t/errors/RuntimeError"] == 1 and m["reward/math/failed"] == 0

        # two hung calls reach max_hung_calls: the worker is restarted and serves again
        health = client.restart_hung_workers()
        assert health["reward/faulty/worker_restarts"] == 1
        assert asyncio.run(run([("t", "good")]))[0].score == 1.0

        # a worker process that dies: that sample fails, the next one is scored after a restart
        died = asyncio.run(run([("t", "die")]))[0]
        assert died.failed == "worker_died"
        clusters["faulty"].ensure_ready()
        assert asyncio.run(run([("t", "good")]))[0].failed is None
    finally:
        for c in clusters.values():
            c.shutdown()


@pytest.mark.integration
def test_score_batch_is_one_call_and_counts_like_single_scoring(ray_cluster, tmp_path):
    marker = str(tmp_path / "died")

    def flaky(sample, **fields):
        if sample["response"] == "raise":
            raise RuntimeError("verifier crashed")
        if sample["response"] == "die_once" and not os.path.exists(marker):
            open(marker, "w").close()
            os._exit(1)
        return RewardOutput(float(sample["response"] == "good"), sample["response"] == "good")

    rc = RewardConfig(reward_fn="flaky", tags=["t"], timeout_s=5.0, max_concurrency=8)
    clusters = {"flaky": _cluster("flaky", rc, flaky)}
    try:
        client = RewardClient(clusters, {"t": "flaky"}, {"flaky": rc})
        worker = clusters["flaky"].workers[0]
        import ray

        calls0 = ray.get(worker.stats.remote())["calls"]
        out = asyncio.run(client.score_batch("t", [{"response": r} for r in ("good", "bad", "raise", "good")]))
        assert [(r.score, r.failed) for r in out] == [(1.0, None), (0.0, None), (0.0, "error"), (1.0, None)]
        assert ray.get(worker.stats.remote())["calls"] - calls0 == 4
        m = client.metrics()
        assert m["reward/t/failed"] == 1 and m["reward/t/errors/RuntimeError"] == 1 and m["reward/t/failed_rate"] == 0.25
        # the worker dies inside a batch: the batch is scored again one by one, after a restart
        out = asyncio.run(client.score_batch("t", [{"response": "good"}, {"response": "die_once"}]))
        assert [(r.score, r.failed) for r in out] == [(1.0, None), (0.0, None)]
        assert client.restarts["flaky"] == 1
    finally:
        for c in clusters.values():
            c.shutdown()


def test_unknown_tag_is_an_error():
    client = RewardClient({}, {}, {})
    with pytest.raises(KeyError, match="no reward configured"):
        asyncio.run(client.score("nope", {}))


def test_reward_worker_process_does_not_load_torch():
    """A reward worker imports its module and every registered reward; none of that needs
    torch (it costs seconds of start-up and memory per reward process)."""
    import subprocess
    import sys

    code = ("import sys, roll.workers.reward; from roll.registry import REWARDS; REWARDS.get('math_rule'); "
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300)
    assert out.stdout.strip() == "[]"
