"""WebShop benchmark: episode speed, search speed against bm25s, expert and random agents.

    python bench/webshop.py            # 500 test goals, writes the "## WebShop" section of docs/benchmarks.md
    python bench/webshop.py --quick    # 100 goals, same comparisons (< 60 s)

Measured side by side in one run:
  * reset + 10 steps (search, paging, item, option, sub-pages, buy) per episode, in ms
    (target: under 20 ms on average);
  * one top-50 search: our inverted-index BM25 vs bm25s (Lucene variant, same tokens), uncached;
  * expert (env.expert_plan) and random (uniform over valid_actions) agents on the test split.
Last line: RESULT key=value ...
"""
from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from common import write_section

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "benchmarks.md"
SECTION = "## WebShop"


def ans(a: str) -> str:
    return f"<answer>{a}</answer>"


def episode_script(env) -> list[str]:
    """Ten actions touching every page kind; the product and option come from the live state."""
    goal = env.goal
    query = " ".join([goal["query"], *goal["attributes"]])
    return [f"search[{query}]", "click[next >]", "click[< prev]", None, None, "click[description]",
            "click[< prev]", "click[features]", "click[< prev]", "click[buy now]"]


def time_episodes(env, seeds: list[int]) -> list[float]:
    """Wall time of reset + 10 steps per seed, in ms (search cache cleared before the run)."""
    env.catalog.search._cached.cache_clear()
    times = []
    for seed in seeds:
        t0 = time.perf_counter()
        env.reset(seed=seed)
        for a in episode_script(env):
            if a is None:  # open the first hit, then pick its first option value
                s = env.state
                if s.page == "results":
                    a = f"click[{s.results[0]}]"
                else:
                    opts = env.catalog.by_asin[s.asin]["options"]
                    a = f"click[{next(iter(opts.values()))[0]}]" if opts else "click[reviews]"
            env.step(ans(a))
        times.append((time.perf_counter() - t0) * 1e3)
    return times


def time_search(catalog, queries: list[str]) -> tuple[float, float, float, float]:
    """Mean ms per uncached top-50 query (ours, bm25s); shares of queries whose top-10 scores
    agree and whose top-10 id lists are identical (they differ only in the order of ties)."""
    import bm25s

    from roll.envs.webshop.search import document_text, tokenize

    docs = [tokenize(document_text(p)) for p in catalog.products]
    ref = bm25s.BM25(k1=0.9, b=0.4, method="lucene")
    ref.index(docs, show_progress=False)
    toks = [list(dict.fromkeys(tokenize(q))) for q in queries]
    index = catalog.search.index
    t0 = time.perf_counter()
    ours = [index.top(q, 50) for q in toks]
    t_ours = (time.perf_counter() - t0) * 1e3 / len(toks)
    t0 = time.perf_counter()
    theirs = [ref.retrieve([q], k=50, show_progress=False, n_threads=1) for q in toks]
    t_ref = (time.perf_counter() - t0) * 1e3 / len(toks)
    same_scores = float(np.mean([
        np.allclose(index.scores(q)[a[:10]], r.scores[0][:10], rtol=1e-5) for q, a, r in zip(toks, ours, theirs)]))
    same_ids = float(np.mean([a[:10] == r.documents[0][:10].tolist() for a, r in zip(ours, theirs)]))
    return t_ours, t_ref, same_scores, same_ids


def run_agents(env, seeds: list[int]) -> dict[str, float]:
    rng = np.random.default_rng(0)
    out = {}
    for name in ("expert", "random"):
        scores, steps = [], []
        for seed in seeds:
            env.reset(seed=seed)
            term = trunc = False
            n = 0
            while not (term or trunc):
                if name == "expert":
                    a = env.expert_plan()[0]
                else:
                    choices = env.valid_actions()
                    a = choices[int(rng.integers(len(choices)))]
                _, r, term, trunc, _ = env.step(ans(a))
                n += 1
            scores.append(r if term else 0.0)
            steps.append(n)
        out[f"{name}_success"] = float(np.mean(np.array(scores) == 1.0))
        out[f"{name}_reward"] = float(np.mean(scores))
        out[f"{name}_steps"] = float(np.mean(steps))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="100 goals instead of 500")
    ap.add_argument("--no-docs", action="store_true", help="do not update docs/benchmarks.md")
    args = ap.parse_args(argv)
    n = 100 if args.quick else 500

    from roll.envs.webshop.catalog import load_catalog
    from roll.envs.webshop.env import WebShopEnv

    t0 = time.perf_counter()
    catalog = load_catalog()
    load_ms = (time.perf_counter() - t0) * 1e3
    env = WebShopEnv(split="test")
    seeds = list(range(n))
    time_episodes(env, seeds[:20])  # warm-up (imports, first allocations)
    ep = time_episodes(env, seeds)
    ep_mean, ep_p95 = statistics.fmean(ep), float(np.percentile(ep, 95))
    queries = [g["instruction"] for g in catalog.goals("test")[:n]]
    t_ours, t_ref, same_scores, same_ids = time_search(catalog, queries)
    agents = run_agents(env, seeds)

    print(f"catalog: {len(catalog.products)} products, load+index {load_ms:.0f} ms")
    print(f"reset + 10 steps: mean {ep_mean:.2f} ms, p95 {ep_p95:.2f} ms over {n} episodes (target < 20 ms)")
    print(f"top-50 search per query: ours {t_ours:.3f} ms, bm25s {t_ref:.3f} ms "
          f"-> {t_ref / t_ours:.1f}x; same top-10 scores {same_scores:.0%}, identical top-10 ids {same_ids:.0%}")
    for name in ("expert", "random"):
        print(f"{name}: success {agents[name + '_success']:.3f}, mean final reward "
              f"{agents[name + '_reward']:.4f}, mean steps {agents[name + '_steps']:.1f} ({n} test goals)")

    if not args.no_docs:
        mode = "--quick, 100 goals" if args.quick else "500 test goals"
        write_section(f"""{SECTION}

`python bench/webshop.py` ({mode}; {platform.processor() or platform.machine()}, Python {platform.python_version()}).

| measure | value |
|---|---|
| catalog | {len(catalog.products)} products, load + index {load_ms:.0f} ms (once per process) |
| reset + 10 steps (search, paging, item, option, sub-pages, buy) | mean {ep_mean:.2f} ms, p95 {ep_p95:.2f} ms (target < 20 ms) |
| top-50 BM25 search, uncached, ours vs bm25s (same tokens, Lucene BM25) | {t_ours:.3f} ms vs {t_ref:.3f} ms: **{t_ref / t_ours:.1f}x** faster; same top-10 scores for {same_scores:.0%} of queries (identical id order {same_ids:.0%}: bm25s orders ties differently) |
| expert agent (`expert_plan`), test split | success (reward 1.0) {agents['expert_success']:.1%}, mean reward {agents['expert_reward']:.3f}, {agents['expert_steps']:.1f} steps |
| random agent (uniform over `valid_actions`), test split | success {agents['random_success']:.1%}, mean reward {agents['random_reward']:.4f}, {agents['random_steps']:.1f} steps |

""", quick=args.quick)
    print(f"RESULT episode_ms={ep_mean:.3f} episode_p95_ms={ep_p95:.3f} search_speedup_vs_bm25s={t_ref / t_ours:.2f} "
          f"expert_success={agents['expert_success']:.4f} random_success={agents['random_success']:.4f} "
          f"random_reward={agents['random_reward']:.4f} goals={n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
