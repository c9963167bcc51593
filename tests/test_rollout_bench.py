"""bench/rollout.py's real-engine helpers (step-curve fit, lower bound) and bench/async_e2e.py's
config composition and run summaries: pure functions, no engine."""
import math
import random
import statistics

import pytest
from bench_loader import load_bench


@pytest.fixture(scope="module")
def rb():
    return load_bench("rollout")


@pytest.fixture(scope="module")
def e2e():
    return load_bench("async_e2e")


def test_fit_recovers_a_line_and_clamps(rb):
    a, c = rb.fit_step_curve({1: 0.011, 4: 0.014, 16: 0.026, 64: 0.074})  # 10 ms + 1 ms x b
    assert a == pytest.approx(0.010, abs=1e-9) and c == pytest.approx(0.001, abs=1e-9)
    a, c = rb.fit_step_curve({1: 0.020, 64: 0.010})  # noise that makes steps cheaper with b: no negative slope
    assert c == 0.0 and a == pytest.approx(0.015)
    assert rb.fit_step_curve({8: 0.03}) == (0.03, 0.0)
    with pytest.raises(ValueError):
        rb.fit_step_curve({})


def _slow_bound(tokens, chains, a, c, slots):
    """Obviously correct: the best throughput over every batch size up to slots, by enumeration."""
    best = max(b / (a + c * b) for b in range(1, slots + 1))
    return max(sum(tokens) / best, max(n * (a + c) + e for n, e in chains))


def test_lower_bound_matches_enumeration(rb):
    rng = random.Random(0)
    for _ in range(50):
        tokens = [rng.randrange(1, 500) for _ in range(rng.randrange(1, 40))]
        chains = [(t, rng.random() * 0.01) for t in tokens]
        a, c, slots = rng.random() * 0.02, rng.random() * 0.002, rng.randrange(1, 128)
        assert rb.engine_lower_bound(tokens, chains, a, c, slots) == pytest.approx(_slow_bound(tokens, chains, a, c, slots))


def test_lower_bound_regimes(rb):
    # flat curve (a step costs the same at any batch): 64 slots serve 64 chains at the cost of one
    assert rb.engine_lower_bound([100] * 64, [(100, 0.0)] * 64, 0.01, 0.0, 64) == pytest.approx(1.0)
    # linear curve, no fixed cost: batching buys nothing, the bound is every token one after another
    assert rb.engine_lower_bound([100] * 64, [(100, 0.0)] * 64, 0.0, 0.001, 64) == pytest.approx(6.4)
    # one long episode dominates a light batch
    assert rb.engine_lower_bound([10, 1000], [(10, 0.0), (1000, 0.5)], 0.01, 0.0, 64) == pytest.approx(10.5)
    with pytest.raises(ValueError):
        rb.engine_lower_bound([1], [(1, 0.0)], 0.01, 0.0, 0)


def test_clamped_lengths_forces_the_drawn_length(rb):
    import asyncio

    from roll.strategies.base import GenerationRequest, GenerationResult

    seen = []

    class Engine:
        async def generate(self, r):
            seen.append(r)
            return GenerationResult(r.request_id, [1] * r.max_new_tokens, [0.0] * r.max_new_tokens, "length")

        async def abort(self, ids):
            pass

    client = rb.ClampedLengths(Engine(), lambda r: 7)
    r = GenerationRequest("x", [1, 2], max_new_tokens=100, stop_strings=["</answer>"], stop_token_ids=[5])
    out = asyncio.run(client.generate(r))
    assert len(out.output_ids) == 7
    assert seen[0].meta["ignore_eos"] is True and seen[0].stop_strings == [] and seen[0].stop_token_ids == []
    r = GenerationRequest("y", [1], max_new_tokens=3)
    assert len(asyncio.run(client.generate(r)).output_ids) == 3  # never above the caller's own budget


def test_e2e_rl_config_is_vllm_without_hf_keys(e2e, tmp_path):
    import yaml

    from roll.config.loader import load_config

    cfg = e2e.rl_config()
    (tmp_path / "rl.yaml").write_text(yaml.safe_dump(cfg))
    loaded = load_config(tmp_path / "rl.yaml")  # composes with frozenlake_cpu.yaml and passes the strict schema
    assert loaded.actor_infer.strategy_args.strategy_name == "vllm"
    assert loaded.actor_infer.strategy_args.strategy_config == {"max_model_len": 1024}
    assert loaded.custom_envs["FrozenLake"].turn_template == "{observation}"
    infer = cfg["actor_infer"]["strategy_args"]
    assert infer["strategy_name"] == "vllm" and "max_batch_size" not in infer["strategy_config"]
    assert cfg["algorithm"]["adv_estimator"] == "gigpo"
    assert cfg["algorithm"]["adv_estimator_args"] == {"step_weight": 1.0, "balance_episodes": True}
    # frozenlake_grpo.yaml's optimizer merged over the base's training args, not in place of them
    train = loaded.actor_train.training_args
    assert train.lr == 5e-4 and list(train.adam_betas) == [0.9, 0.95] and train.per_device_train_batch_size == 64
    assert cfg["rollout_batch_size"] == 64


def test_e2e_chain_pair_starts_from_sft_with_its_own_seed(e2e, tmp_path):
    for pair in (0, 1):
        chain = e2e.rl_chain(tmp_path, pair, steps=5, quick=False)
        assert chain["seed"] == 42 + pair  # a chain forces its seed on every stage: one chain per pair
        assert list(chain["stages"]) == [f"sync-{pair}", f"async-{pair}"]
        for name, st in chain["stages"].items():
            over = st["overrides"]
            assert st["input"] is None and over["pretrain"] == str(tmp_path / "warm" / "sft" / "final_model")
            assert over["rollout"]["async_generation_ratio"] == (1.0 if name.startswith("async") else 0.0)
            assert over["max_steps"] == over["eval_steps"] == 5


def test_e2e_summary_and_compare(e2e):
    rows = [{"step": s, "env/FrozenLake/success": v, "timing/step": t, "timing/rollout": t / 2}
            for s, v, t in ((1, 0.25, 9.0), (2, 0.5, 3.0), (3, 0.5, 2.0), (4, 0.75, 4.0))]
    rows += [{"step": 0, "val/env/FrozenLake/success": 0.25, "val_greedy/env/FrozenLake/success": 0.5},
             {"step": 4, "val/env/FrozenLake/success": 0.5, "val_greedy/env/FrozenLake/success": 0.75}]
    r = e2e.run_summary(rows, episodes_per_step=64, val_episodes=64)
    assert r["success"] == [0.25, 0.5, 0.5, 0.75] and r["steps"] == 4
    assert r["step_s"] == 3.0  # median of steps 3..N: warm-up steps left out
    assert r["mean_success"] == 0.5 and r["se"] == pytest.approx(math.sqrt(0.25 / 256))
    assert r["val"]["sampled"] == (0.25, 0.5, pytest.approx(math.sqrt(0.25 / 64)))
    assert r["val"]["greedy"][:2] == (0.5, 0.75)
    slow = dict(r, step_s=4.0)
    better = dict(r, mean_success=0.6, success=[0.35, 0.5, 0.6, 0.95],
                  val={"sampled": (0.25, 0.6, 0.06), "greedy": (0.5, 0.75, 0.05)})
    cmp = e2e.compare([slow, slow], [r, better])
    assert cmp["async_step_speedup"] == pytest.approx(4.0 / 3.0)
    assert cmp["async_success_delta_pp"] == pytest.approx(5.0)
    assert cmp["delta_se_pp"] == pytest.approx(100 * math.hypot(r["se"] / math.sqrt(2), r["se"] / math.sqrt(2)))
    diffs = [0.0] * 4 + [0.1, 0.0, 0.1, 0.2]
    assert cmp["paired_se_pp"] == pytest.approx(100 * statistics.stdev(diffs) / math.sqrt(8))
    assert cmp["val"]["sampled"][2] == pytest.approx(5.0) and cmp["val"]["greedy"][2] == pytest.approx(0.0)
    with pytest.raises(RuntimeError):
        e2e.run_summary([{"step": 1, "loss": 0.1}], 64)


def test_curve_fn_interpolates_and_clamps(rb):
    f = rb.curve_fn({4: 0.010, 1: 0.004, 16: 0.034})
    assert f(1) == 0.004 and f(0) == 0.004 and f(100) == 0.034
    assert f(2) == pytest.approx(0.006) and f(10) == pytest.approx(0.022)


def test_simulate_schedule_small_cases(rb):
    eps = [[4], [1, 1, 1]]
    flat = lambda b: 1.0
    # lockstep: turns of 4, 1 and 1 steps; per-sample: the 3-turn episode runs beside the long one
    assert rb.simulate_schedule(eps, flat, 64, True) == 6.0
    assert rb.simulate_schedule(eps, flat, 64, False) == 4.0
    # a step that costs b x one sequence's: batching buys nothing, both cost every token in turn
    prop = lambda b: float(b)
    assert rb.simulate_schedule(eps, prop, 64, True) == 7.0 == rb.simulate_schedule(eps, prop, 64, False)
    # one slot: everything in sequence whatever the schedule
    assert rb.simulate_schedule(eps, flat, 1, False) == 7.0 == rb.simulate_schedule(eps, flat, 1, True)
    assert rb.simulate_schedule([], flat, 4, True) == 0.0 == rb.simulate_schedule([], flat, 4, False)


def test_simulate_flat_curve_favours_per_sample_on_the_long_tail(rb):
    eps = rb.draw_episodes(64, 0, 8, 24, 256, 1.2)
    assert len(eps) == 64 and all(1 <= len(e) <= 8 for e in eps)
    flat = lambda b: 0.002
    lock, per = rb.simulate_schedule(eps, flat, 64, True), rb.simulate_schedule(eps, flat, 64, False)
    # per-sample is the longest chain at best, lockstep the sum of every turn's longest request
    assert per == pytest.approx(0.002 * max(map(sum, eps)))
    assert lock == pytest.approx(0.002 * sum(max(e[k] for e in eps if len(e) > k) for k in range(max(map(len, eps)))))
    assert lock / per > 1.5
