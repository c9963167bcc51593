"""bench/scaling.py: the projection of bench/rollout.py's cost model to many GPUs. Small sizes
only (the engine runs on a virtual clock, so these take seconds)."""
import math
import time

import pytest
from bench_loader import load_bench


@pytest.fixture(scope="module")
def sc():
    return load_bench("scaling")


@pytest.fixture(scope="module")
def small(sc):
    """A small setting where the modes differ: 8 episodes per GPU, short turns."""
    return sc.values(episodes_per_gpu=8, slots=8, median_turn_tokens=32, turn_cap=256, max_turns=8)


def test_the_engine_and_workload_are_bench_rollouts(sc):
    import rollout

    assert sc.rb is rollout and sc.rb.CostModelEngine is rollout.CostModelEngine
    a = sc.values()
    e = sc.episode(a, 5)
    assert len(e) == rollout.episode_turns(5, 16) and all(2 <= n <= 2048 for n in e)


def test_every_assumption_has_a_unit_or_source(sc):
    for name, p in sc.ASSUMPTIONS.items():
        assert p.source.strip(), name
        assert isinstance(p.value, (int, float)) and p.value > 0, name
    with pytest.raises(KeyError):
        sc.values(slotz=3)
    rows = sc.assumptions_table()
    assert len(rows) == len(sc.ASSUMPTIONS) + 2


def test_virtual_clock_takes_no_wall_time_and_detects_deadlock(sc):
    import asyncio

    async def sleeper(clock):
        await asyncio.sleep(3600.0)
        return clock.now

    t0 = time.monotonic()
    assert sc.run_virtual(sleeper) == pytest.approx(3600.0)
    assert time.monotonic() - t0 < 5.0

    async def stuck(clock):
        await asyncio.get_running_loop().create_future()  # nobody will ever set it

    with pytest.raises(RuntimeError, match="deadlock"):
        sc.run_virtual(stuck)
    assert sc.rb.time is time  # the real clock is back


def test_decode_roofline_is_monotonic_and_memory_bound_for_7b(sc):
    a = sc.values()
    steps = [sc.decode_step_s(a, batch=b) for b in (1, 8, 64, 256)]
    assert steps == sorted(steps) and steps[0] < steps[-1]
    assert sc.decode_step_s(a, context=512) < sc.decode_step_s(a, context=8192)
    # bf16 7.6B parameters: 15.2 GB read per step at least
    assert sc.model_bytes(a) == pytest.approx(15.2e9)
    assert steps[0] >= 15.2e9 / (3.35e12 * 0.7)
    # more GPUs train the same tokens faster
    assert sc.train_s(a, 1e6, 16) == pytest.approx(sc.train_s(a, 1e6, 8) / 2)


def test_broadcast_ring_stays_flat_and_tree_grows_by_levels(sc):
    a = sc.values()
    ring = [sc.broadcast_s(a, g, "ring") for g in (8, 64, 512, 1024)]
    tree = [sc.broadcast_s(a, g, "tree") for g in (8, 64, 512, 1024)]
    assert ring == sorted(ring) and tree == sorted(tree)
    assert ring[-1] < 2 * ring[0]  # pipelined: about one copy up to 128 nodes
    assert tree[-1] > 4 * tree[0]  # one full copy per level (8 levels for 128 nodes)
    assert all(r <= t + 1e-12 for r, t in zip(ring, tree))
    with pytest.raises(ValueError):
        sc.broadcast_s(a, 8, "butterfly")
    assert sc.sync_colocated_s(a, 8) < sc.sync_colocated_s(a, 64)  # the gather leaves the node


def test_per_sample_beats_lockstep_and_respects_the_lower_bound(sc, small):
    step = sc.decode_step_s(small)
    eps = [sc.episode(small, i) for i in range(8)]
    ps = sc.engine_per_sample(small, eps, step)
    turns = sc.engine_lockstep_turns(small, eps, step)
    lock = sum(turns) + len(turns) * small["env_step_s"]
    # lower bound of bench/rollout.py: total decode / slots, or the longest episode's own chain
    bound = max(sum(map(sum, eps)) * step / small["slots"], ps["chain"])
    assert ps["finish"] >= bound - 1e-9
    assert ps["finish"] <= lock + 1e-9
    # with a slot per episode nothing queues: per-sample is exactly the longest chain
    assert ps["finish"] == pytest.approx(ps["chain"])
    # each lockstep turn lasts as long as its longest request
    assert turns[0] == pytest.approx(max(e[0] for e in eps) * step)


def test_projection_is_reproducible(sc, small):
    a, b = sc.project(small, 2), sc.project(small, 2)
    for key in ("lockstep", "per_sample", "chain", "decode_bound", "tokens"):
        assert a[key] == b[key], key
    assert a["async"]["step"] == b["async"]["step"]


def test_weak_scaling_monotonic_where_it_must_be(sc, small):
    runs = [sc.project(small, n) for n in (2, 4, 8)]
    for lo, hi in zip(runs, runs[1:]):
        assert hi["batch"] == 2 * lo["batch"]
        # more episodes: the longest episode and every lockstep turn's max can only grow
        assert hi["chain"] >= lo["chain"]
        assert hi["lockstep_rollout"] >= lo["lockstep_rollout"] - 1e-9
        # the same tokens per GPU: training time per step stays put
        assert hi["train"] == pytest.approx(lo["train"], rel=0.3)
    for r in runs:
        assert r["per_sample"] <= r["lockstep"] + 1e-9
        assert r["speedup_per_sample"] >= 1.0
        assert r["async"] and 1 <= r["async"]["rollout_gpus"] < r["gpus"]


def test_strong_scaling_more_gpus_never_slower_per_sample(sc, small):
    runs = [sc.project(small, n, episodes_per_step=32) for n in (2, 4, 8)]
    per = [r["per_sample_rollout"] for r in runs]
    assert per == sorted(per, reverse=True)
    # and it stops helping once the longest episode sets the batch time
    assert runs[-1]["per_sample_rollout"] == pytest.approx(runs[-1]["chain"], rel=0.05)


def test_limits_are_named_and_each_can_bind(sc, small):
    p = sc.project(small, 2)
    lim = p["limits"]
    assert set(lim) == {"weight_sync", "env_cpu", "reward", "long_tail"}
    assert 0 < lim["weight_sync"]["share"] < 1 and lim["env_cpu"]["use"] < 1 and lim["reward"]["use"] < 1
    assert sc.binding(p) in ("training", "rollout", "long tail (stale)")
    # CPU: at the projected rate, an env step costing more than the threshold binds
    heavy = sc.values(**{**{k: small[k] for k in ("episodes_per_gpu", "slots", "median_turn_tokens", "turn_cap", "max_turns")},
                         "env_cpu_s": lim["env_cpu"]["binds_at_cpu_s"] * 4})
    assert "env+reward CPU" in sc.binding(sc.project(heavy, 2))
    # weight sync: a slow network makes the broadcast a large share of the step
    slow = sc.values(**{**{k: small[k] for k in ("episodes_per_gpu", "slots", "median_turn_tokens", "turn_cap", "max_turns")},
                        "ib_gb_s": 0.05})
    assert "weight sync" in sc.binding(sc.project(slow, 2))
    # long tail: stale restarts once episodes outlive the staleness window
    assert 0.0 <= lim["long_tail"]["stale_token_share"] < 1.0
    assert lim["long_tail"]["chain_over_decode_bound"] > 0


def test_quick_run_prints_result_and_never_writes_docs(sc, capsys, monkeypatch):
    for key, value in dict(episodes_per_gpu=8, slots=8, median_turn_tokens=32, turn_cap=256, max_turns=8).items():
        monkeypatch.setitem(sc.ASSUMPTIONS, key, sc.Param(value, "", "small test setting"))
    before = sc.SCALING_DOC.read_text()
    assert sc.main(["--quick", "--gpus", "2,4"]) == 0
    out = capsys.readouterr().out
    lines = out.strip().splitlines()
    assert lines[-1].startswith("RESULT ") and "speedup_async_min=" in lines[-1] and "sync_share_max=" in lines[-1]
    assert not math.isnan(float(lines[-1].split("speedup_async_min=")[1].split()[0]))
    assert out.count("(docs not written: --quick run)") == 2
    assert sc.SCALING_DOC.read_text() == before
