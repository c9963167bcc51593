"""Scale-out on paper: the rollout cost model of bench/rollout.py projected to 8-1024 GPUs.

    python bench/scaling.py            # 8, 16, 64, 256, 1024 GPUs; rewrites the generated section
                                       # of docs/scaling.md and "## Scaling" of docs/benchmarks.md
    python bench/scaling.py --quick    # 8, 16, 64 GPUs, prints only (< 60 s)

Nothing here runs on a GPU. The engine is bench/rollout.py's ``CostModelEngine`` (continuous
batching: ``slots`` decode slots, every decode step of ``step_s`` gives each active request one
token) and the workload is its ``episode_turns`` / ``turn_tokens`` (long-tailed turns and
tokens per turn), imported, not copied. The engine runs on a virtual clock, so an hour of
cluster time costs milliseconds. Its two parameters come from a roofline of the stated GPU and
model (``decode_step_s``); training, weight sync, env CPU and reward workers are closed-form
models over the stated assumptions (``ASSUMPTIONS``: every value with its unit and source).

Modes, all on the same GPU budget of N GPUs:
- lockstep: colocated, every turn of the batch is a barrier across all engines;
- per-sample: colocated, each episode at its own pace (async ratio 0); the batch ends with its
  last episode;
- async-1: disaggregated, a share of the GPUs generates while the rest trains (ratio 1: at most
  one batch ahead, samples at most one version old; longer-lived episodes restart as stale).
"""
from __future__ import annotations

import argparse
import asyncio
import math
import os
import platform
import statistics
import sys
import time
import types
from dataclasses import dataclass
from pathlib import Path

import rollout as rb  # bench/rollout.py: the cost-model engine and the long-tail workload
from common import result_line, write_section

from roll.strategies.base import GenerationRequest

ROOT = Path(__file__).resolve().parents[1]
SCALING_DOC = ROOT / "docs" / "scaling.md"
FULL_GPUS = (8, 16, 64, 256, 1024)
QUICK_GPUS = (8, 16, 64)


@dataclass(frozen=True)
class Param:
    value: float
    unit: str
    source: str


ASSUMPTIONS: dict[str, Param] = {
    # model: Qwen2.5-7B-shaped
    "params": Param(7.6e9, "parameters", "Qwen2.5-7B model card: 7.61B parameters"),
    "bytes_per_param": Param(2, "bytes", "bf16 weights, as synced to the inference engines"),
    "layers": Param(28, "", "Qwen2.5-7B config.json (num_hidden_layers)"),
    "kv_heads": Param(4, "", "Qwen2.5-7B config.json (num_key_value_heads, grouped-query attention)"),
    "head_dim": Param(128, "", "Qwen2.5-7B config.json (hidden_size 3584 / 28 heads)"),
    # GPU and node: H100 SXM class
    "hbm_tb_s": Param(3.35, "TB/s", "NVIDIA H100 SXM datasheet (HBM3)"),
    "hbm_eff": Param(0.7, "", "assumed share of HBM bandwidth a decode step reaches"),
    "peak_tflops": Param(989, "TFLOP/s", "NVIDIA H100 SXM datasheet, dense BF16"),
    "decode_mfu": Param(0.5, "", "assumed share of peak FLOPs in a decode step's matmuls"),
    "decode_overhead_ms": Param(1.0, "ms", "assumed scheduling and launch cost per decode step"),
    "slots": Param(64, "sequences", "assumed engine batch (vLLM max_num_seqs), one engine per GPU (TP 1)"),
    "context_tokens": Param(2048, "tokens", "assumed mean context per sequence during decode (prompt + history)"),
    "train_mfu": Param(0.35, "", "assumed model FLOPs utilisation of training and logprob passes"),
    "gpus_per_node": Param(8, "GPUs", "DGX/HGX H100 node"),
    "nvlink_gb_s": Param(450, "GB/s", "H100 NVLink 900 GB/s bidirectional (datasheet), one direction"),
    "nvlink_eff": Param(0.7, "", "assumed"),
    "ib_gb_s": Param(50, "GB/s", "one 400 Gb/s NDR InfiniBand port per GPU (DGX H100)"),
    "ib_eff": Param(0.8, "", "assumed share of line rate a large NCCL transfer reaches"),
    "chunk_mib": Param(1, "MiB", "assumed pipelining unit of a chain (ring) broadcast"),
    "bucket_mib": Param(256, "MiB", "roll's weight-sync bucket (docs/benchmarks.md, Model update)"),
    "cpu_cores_per_gpu": Param(14, "cores", "DGX H100: 112 CPU cores for 8 GPUs"),
    "reserved_cores_per_gpu": Param(4, "cores", "assumed: engine, trainer, Ray and data-loading processes"),
    # workload: bench/rollout.py's distributions with longer turns
    "episodes_per_gpu": Param(64, "episodes", "assumed batch per GPU per step (weak scaling)"),
    "max_turns": Param(16, "turns", "bench/rollout.py: turns = 1 + 2 x floor(Pareto(1) - 1), capped"),
    "median_turn_tokens": Param(128, "tokens", "assumed median tokens per turn (log-normal, as bench/rollout.py)"),
    "turn_sigma": Param(1.5, "", "bench/rollout.py: log-normal sigma of tokens per turn"),
    "turn_cap": Param(2048, "tokens", "assumed max_new_tokens per turn"),
    "prompt_tokens": Param(512, "tokens", "assumed first prompt (instruction + first observation)"),
    "obs_tokens": Param(128, "tokens", "assumed observation tokens per later turn"),
    "env_step_s": Param(0.08, "s", "docs/benchmarks.md Sandbox: median 79 ms wall per sandboxed run"),
    "env_cpu_s": Param(0.021, "CPU s", "docs/benchmarks.md Sandbox: 21 ms CPU per sandboxed run"),
    "reward_runs_per_episode": Param(8, "runs", "assumed code reward with 8 test cases"),
    "reward_runs_per_core_s": Param(8.8, "runs/s", "docs/benchmarks.md Sandbox: 17.6 executions/s on 2 cores"),
    "async_ratio": Param(1, "", "async_generation_ratio of the async mode"),
}


def values(**overrides: float) -> dict[str, float]:
    unknown = set(overrides) - set(ASSUMPTIONS)
    if unknown:
        raise KeyError(f"unknown assumption(s): {sorted(unknown)}")
    return {k: overrides.get(k, p.value) for k, p in ASSUMPTIONS.items()}


# ---------------------------------------------------------------- closed-form parts
def model_bytes(a: dict) -> float:
    return a["params"] * a["bytes_per_param"]


def decode_step_s(a: dict, batch: float | None = None, context: float | None = None) -> float:
    """Roofline of one decode step: read the weights and every sequence's KV cache once
    (memory-bound), or the matmuls (compute-bound), whichever is slower, plus a fixed cost."""
    batch = a["slots"] if batch is None else batch
    context = a["context_tokens"] if context is None else context
    kv_per_token = 2 * a["layers"] * a["kv_heads"] * a["head_dim"] * a["bytes_per_param"]
    memory = (model_bytes(a) + batch * context * kv_per_token) / (a["hbm_tb_s"] * 1e12 * a["hbm_eff"])
    compute = 2 * a["params"] * batch / (a["peak_tflops"] * 1e12 * a["decode_mfu"])
    return a["decode_overhead_ms"] / 1e3 + max(memory, compute)


def train_s(a: dict, tokens: float, gpus: int) -> float:
    """Actor forward + backward (6 x params FLOPs per token) plus the reference and old-logprob
    forward passes (2 x params each)."""
    return 10 * a["params"] * tokens / (gpus * a["peak_tflops"] * 1e12 * a["train_mfu"])


def sync_colocated_s(a: dict, gpus: int) -> float:
    """Colocated weight update: the sharded trainer gathers the full weights (over InfiniBand
    once it spans nodes, NVLink inside one) and hands them to the engine on the same GPU."""
    b = model_bytes(a)
    nodes = math.ceil(gpus / a["gpus_per_node"])
    inside = b * (1 - 1 / min(gpus, a["gpus_per_node"])) / (a["nvlink_gb_s"] * 1e9 * a["nvlink_eff"])
    across = b * (1 - 1 / nodes) / (a["ib_gb_s"] * 1e9 * a["ib_eff"]) if nodes > 1 else 0.0
    return inside + across


def broadcast_s(a: dict, engines: int, algo: str) -> float:
    """Trainer -> ``engines`` inference GPUs on other nodes, then NVLink inside each node.
    ring: NCCL's pipelined chain, bytes / bandwidth plus one chunk per hop for every bucket call;
    tree: store-and-forward binary tree, one full copy per level."""
    b = model_bytes(a)
    ib = a["ib_gb_s"] * 1e9 * a["ib_eff"]
    nodes = max(1, math.ceil(engines / a["gpus_per_node"]))
    fan_out = b / (a["nvlink_gb_s"] * 1e9 * a["nvlink_eff"]) if engines > 1 else 0.0
    if algo == "ring":
        calls = math.ceil(b / (a["bucket_mib"] * 2**20))
        return b / ib + calls * (nodes - 1) * a["chunk_mib"] * 2**20 / ib + fan_out
    if algo == "tree":
        return math.ceil(math.log2(nodes + 1)) * b / ib + fan_out
    raise ValueError(f"unknown broadcast algorithm {algo!r}")


# ---------------------------------------------------------------- the workload
def episode(a: dict, index: int) -> list[int]:
    """Tokens per turn of episode ``index`` (bench/rollout.py's draws, deterministic)."""
    turns = rb.episode_turns(index, int(a["max_turns"]))
    return [rb.turn_tokens(index * 1009 + k, a["median_turn_tokens"], int(a["turn_cap"]), a["turn_sigma"])
            for k in range(turns)]


def trajectory_tokens(a: dict, eps: list[list[int]]) -> float:
    return sum(a["prompt_tokens"] + (len(e) - 1) * a["obs_tokens"] + sum(e) for e in eps)


# ---------------------------------------------------------------- the engine on a virtual clock
class VirtualClock:
    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now


def run_virtual(make_coro):
    """Run ``make_coro(clock)`` on an event loop whose clock jumps to the next timer instead of
    waiting: sleeps and engine decode steps take no wall time. bench/rollout.py reads
    ``time.monotonic`` for the engine, so its ``time`` is pointed at the same clock meanwhile."""
    clock = VirtualClock()
    loop = asyncio.new_event_loop()
    loop.time = clock.monotonic
    select = loop._selector.select

    def advance(timeout=None):
        if timeout is None:  # nothing scheduled and nothing ready: the simulation can never finish
            raise RuntimeError("virtual-time simulation deadlocked (no timer pending)")
        clock.now += max(timeout, 0.0)
        return select(0)

    loop._selector.select = advance
    real_time = rb.time
    rb.time = types.SimpleNamespace(monotonic=clock.monotonic)
    try:
        return loop.run_until_complete(make_coro(clock))
    finally:
        rb.time = real_time
        loop.close()


def _engine(a: dict, step_s: float) -> rb.CostModelEngine:
    return rb.CostModelEngine(int(a["slots"]), step_s, lambda r: r.max_new_tokens, 0, 1)


def _request(rid: str, tokens: int) -> GenerationRequest:
    return GenerationRequest(rid, [], max_new_tokens=tokens)


def engine_per_sample(a: dict, eps: list[list[int]], step_s: float) -> dict:
    """One engine, every episode started at once, each at its own pace. Returns the finish time
    and each episode's chain (its own decode + env time, without queueing)."""
    async def go(clock):
        eng = _engine(a, step_s)

        async def one(i, turns):
            for k, n in enumerate(turns):
                await eng.generate(_request(f"{i}.{k}", n))
                await asyncio.sleep(a["env_step_s"])

        await asyncio.gather(*(one(i, e) for i, e in enumerate(eps)))
        await eng.close()
        return clock.now

    finish = run_virtual(go) if eps else 0.0
    return {"finish": finish, "chain": max((sum(e) * step_s + len(e) * a["env_step_s"] for e in eps), default=0.0)}


def engine_lockstep_turns(a: dict, eps: list[list[int]], step_s: float) -> list[float]:
    """One engine, lockstep: the decode time of each turn (all of the turn's requests at once)."""
    async def go(clock):
        eng = _engine(a, step_s)
        out = []
        for t in range(max(map(len, eps), default=0)):
            t0 = clock.now
            await asyncio.gather(*(eng.generate(_request(f"{i}.{t}", e[t])) for i, e in enumerate(eps) if len(e) > t))
            out.append(clock.now - t0)
        await eng.close()
        return out

    return run_virtual(go) if eps else []


def engine_stream(a: dict, first: int, count: int, inflight: int, step_s: float) -> dict:
    """One engine fed without pause (async): ``inflight`` episodes at a time, a new one starts
    when one ends. Returns episodes/s over the second half and every episode's lifetime."""
    async def go(clock):
        eng = _engine(a, step_s)
        done: list[tuple[float, float, int]] = []  # (start, end, tokens)
        nxt = first

        async def worker():
            nonlocal nxt
            while nxt < first + count:
                i, nxt = nxt, nxt + 1
                t0, turns = clock.now, episode(a, i)
                for k, n in enumerate(turns):
                    await eng.generate(_request(f"{i}.{k}", n))
                    await asyncio.sleep(a["env_step_s"])
                done.append((t0, clock.now, sum(turns)))

        await asyncio.gather(*(worker() for _ in range(inflight)))
        await eng.close()
        return done

    done = sorted(run_virtual(go), key=lambda d: d[1])
    half = done[len(done) // 2:]
    span = half[-1][1] - done[len(done) // 2 - 1][1]
    return {"rate": len(half) / span, "episodes": done}


# ---------------------------------------------------------------- one cluster size
def project(a: dict, gpus: int, episodes_per_step: int | None = None) -> dict:
    """Step time and limits of the three modes on ``gpus`` GPUs (one engine per GPU)."""
    batch = int(episodes_per_step or a["episodes_per_gpu"] * gpus)
    step_s = decode_step_s(a)
    eps = [episode(a, i) for i in range(batch)]
    per_engine = [eps[e::gpus] for e in range(gpus)]  # the router spreads new episodes evenly
    train_tokens = trajectory_tokens(a, eps)
    env_steps = sum(len(e) for e in eps)

    turn_times = [engine_lockstep_turns(a, p, step_s) for p in per_engine]
    turns = max(map(len, turn_times))
    lock_rollout = sum(max((tt[t] for tt in turn_times if len(tt) > t), default=0.0) + a["env_step_s"] for t in range(turns))
    ps = [engine_per_sample(a, p, step_s) for p in per_engine]
    per_rollout = max(r["finish"] for r in ps)
    chain = max(r["chain"] for r in ps)
    decode_bound = max(sum(map(sum, p)) for p in per_engine) * step_s / a["slots"]
    t_train = train_s(a, train_tokens, gpus)
    t_sync = sync_colocated_s(a, gpus)
    lock = lock_rollout + t_train + t_sync
    per = per_rollout + t_train + t_sync
    asy = min((project_async(a, gpus, batch, train_tokens, share, step_s) for share in (0.5, 0.625, 0.75, 0.875)
               if 1 <= round(share * gpus) < gpus), key=lambda r: r["step"], default=None)
    out = {
        "gpus": gpus, "batch": batch, "decode_step_ms": step_s * 1e3, "lockstep_rollout": lock_rollout,
        "per_sample_rollout": per_rollout, "train": t_train, "sync_colocated": t_sync,
        "lockstep": lock, "per_sample": per, "async": asy, "chain": chain, "decode_bound": decode_bound,
        "speedup_per_sample": lock / per, "speedup_async": lock / asy["step"] if asy else float("nan"),
        "tokens": sum(map(sum, eps)), "env_steps": env_steps,
    }
    out["limits"] = limits(a, out)
    return out


def project_async(a: dict, gpus: int, batch: int, train_tokens: float, share: float, step_s: float) -> dict:
    """Disaggregated async ratio r: ``share`` of the GPUs generate without pause (except while
    receiving weights), the others train. A step takes the longer of training + broadcast and
    producing a batch; an episode that lives longer than (1 + r) steps is stale and restarts,
    its tokens wasted (solved as a fixed point, since the step time sets the window)."""
    r_gpus = round(share * gpus)
    ratio = a["async_ratio"]
    # The scheduler keeps up to (1 + r) batches in production, but an engine runs at most
    # ``slots`` requests; more episodes per engine would only wait for their first request
    # (which does not age them), so twice the slots keeps every slot busy across env steps.
    inflight = min(math.ceil((1 + ratio) * batch / r_gpus), 2 * int(a["slots"]))
    count = max(4 * inflight, 256)
    stream = engine_stream(a, 10_000_000 + gpus * 1000, count, inflight, step_s)
    t_train = train_s(a, train_tokens, gpus - r_gpus)
    ring, tree = broadcast_s(a, r_gpus, "ring"), broadcast_s(a, r_gpus, "tree")
    lifetimes = [(end - start, tokens) for start, end, tokens in stream["episodes"]]
    total_tokens = sum(t for _, t in lifetimes)
    step, wasted = t_train + ring, 0.0
    for _ in range(20):
        window = (1 + ratio) * step
        wasted = sum(t for life, t in lifetimes if life > window) / total_tokens
        produce = batch / (r_gpus * stream["rate"] * max(1.0 - wasted, 1e-3)) + ring
        new = max(t_train + ring, produce)
        if abs(new - step) < 1e-9:
            break
        step = new
    return {"step": step, "share": share, "rollout_gpus": r_gpus, "train": t_train, "produce": produce,
            "sync_ring": ring, "sync_tree": tree, "stale_token_share": wasted,
            "bound": "training" if t_train + ring >= produce else "rollout"}


def limits(a: dict, p: dict) -> dict:
    """Where each limit stands for the async mode (the fastest): demand over capacity, and the
    value of the input at which it would bind (demand = capacity)."""
    asy = p["async"]
    step = asy["step"] if asy else p["per_sample"]
    cores = a["cpu_cores_per_gpu"] - a["reserved_cores_per_gpu"]
    env_rate = p["env_steps"] / step / p["gpus"]  # env steps per second per GPU
    reward_rate = p["batch"] / step / p["gpus"] * a["reward_runs_per_episode"]
    env_cores = env_rate * a["env_cpu_s"]
    reward_cores = reward_rate / a["reward_runs_per_core_s"]
    sync = asy["sync_ring"] if asy else p["sync_colocated"]
    return {
        "weight_sync": {"share": sync / step, "tree_share": asy["sync_tree"] / step if asy else float("nan"),
                        "binds_at_gb_s": a["ib_gb_s"] * sync / (0.1 * step)},
        "env_cpu": {"cores_per_gpu": env_cores, "use": env_cores / cores,
                    "binds_at_cpu_s": max(cores - reward_cores, 0.0) / env_rate},
        "reward": {"cores_per_gpu": reward_cores, "use": reward_cores / cores,
                   "binds_at_runs": max(cores - env_cores, 0.0) * a["reward_runs_per_core_s"] / (reward_rate / a["reward_runs_per_episode"])},
        "long_tail": {"chain_over_decode_bound": p["chain"] / p["decode_bound"],
                      "stale_token_share": asy["stale_token_share"] if asy else 0.0},
    }


def binding(p: dict) -> str:
    """The first limit that binds in the async mode, else what sets its step."""
    lim = p["limits"]
    hit = []
    if lim["env_cpu"]["use"] + lim["reward"]["use"] > 1:
        hit.append("env+reward CPU")
    if lim["weight_sync"]["share"] > 0.1:
        hit.append("weight sync")
    if lim["long_tail"]["stale_token_share"] > 0.05:
        hit.append("long tail (stale)")
    return ", ".join(hit) or (p["async"]["bound"] if p["async"] else "rollout")


# ---------------------------------------------------------------- report
def table(results: list[dict]) -> list[str]:
    rows = [
        "| GPUs | episodes / step | lockstep step s | per-sample step s | async-1 step s (rollout GPUs) | per-sample / lockstep "
        "| async-1 / lockstep | async-1 / per-sample | rollout share of the lockstep step | tokens/s per GPU, async-1 | what binds |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in results:
        asy = p["async"]
        rows.append(
            f"| {p['gpus']} | {p['batch']} | {p['lockstep']:.1f} | {p['per_sample']:.1f} | {asy['step']:.1f} ({asy['rollout_gpus']}) "
            f"| {p['speedup_per_sample']:.2f}x | {p['speedup_async']:.2f}x | {p['per_sample'] / asy['step']:.2f}x "
            f"| {100 * p['lockstep_rollout'] / p['lockstep']:.0f}% | {p['tokens'] / asy['step'] / p['gpus']:.0f} | {binding(p)} |")
    return rows


def limits_table(a: dict, results: list[dict]) -> list[str]:
    cores = a["cpu_cores_per_gpu"] - a["reserved_cores_per_gpu"]
    rows = [
        "| GPUs | longest episode s / decode bound s (per-sample) | stale tokens, async-1 | weight sync s, ring / tree "
        "| ring sync share of the async-1 step | IB GB/s per GPU at which sync = 10% of the step "
        f"| env + reward cores per GPU (of {cores:.0f}) | env CPU s per step at which CPU binds | reward runs per episode at which CPU binds |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for p in results:
        asy, lim = p["async"], p["limits"]
        rows.append(
            f"| {p['gpus']} | {p['chain']:.0f} / {p['decode_bound']:.0f} | {100 * lim['long_tail']['stale_token_share']:.1f}% "
            f"| {asy['sync_ring']:.2f} / {asy['sync_tree']:.2f} | {100 * lim['weight_sync']['share']:.2f}% "
            f"| {lim['weight_sync']['binds_at_gb_s']:.1f} | {lim['env_cpu']['cores_per_gpu']:.2f} + {lim['reward']['cores_per_gpu']:.2f} "
            f"| {lim['env_cpu']['binds_at_cpu_s']:.2f} | {lim['reward']['binds_at_runs']:.0f} |")
    return rows


def assumptions_table() -> list[str]:
    rows = ["| assumption | value | unit | source |", "|---|---|---|---|"]
    rows += [f"| `{k}` | {p.value:g} | {p.unit} | {p.source} |" for k, p in ASSUMPTIONS.items()]
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="8, 16 and 64 GPUs only; prints, never writes docs")
    ap.add_argument("--gpus", default=None, help="comma-separated GPU counts (default: 8,16,64,256,1024)")
    ap.add_argument("--no-docs", action="store_true", help="do not rewrite docs/scaling.md and docs/benchmarks.md")
    args = ap.parse_args(argv)
    sizes = tuple(int(g) for g in args.gpus.split(",")) if args.gpus else (QUICK_GPUS if args.quick else FULL_GPUS)
    a = values()
    t0 = time.monotonic()
    weak = []
    for n in sizes:
        weak.append(project(a, n))
        print(table([weak[-1]])[-1], flush=True)
    fixed = int(a["episodes_per_gpu"] * (16 if args.quick else 64))  # one batch over every size
    strong = [project(a, n, fixed) for n in sizes]
    elapsed = time.monotonic() - t0
    print("\n".join(["", *limits_table(a, weak), "", f"strong scaling, {fixed} episodes per step:", *table(strong), "",
                     *limits_table(a, strong)]))
    wall = f"{elapsed:.0f} s on {platform.machine()}, Python {platform.python_version()}, load average {os.getloadavg()[0]:.1f}"
    step_ms = decode_step_s(a) * 1e3
    gen = [
        "## Projection (generated)",
        "",
        f"`python bench/scaling.py{' --quick' if args.quick else ''}` ({wall}). Decode step {step_ms:.1f} ms at "
        f"{a['slots']:.0f} sequences x {a['context_tokens']:.0f} tokens of context ({a['slots'] / step_ms * 1e3:.0f} tokens/s per GPU "
        f"while the slots are full); colocated weight update {sync_colocated_s(a, 64):.2f} s at 64 GPUs.",
        "",
        f"Weak scaling: {a['episodes_per_gpu']:.0f} episodes per GPU per step.",
        "",
        *table(weak),
        "",
        *limits_table(a, weak),
        "",
        f"Strong scaling: {fixed} episodes per step whatever the cluster size.",
        "",
        *table(strong),
        "",
        *limits_table(a, strong),
        "",
        "Assumptions (`ASSUMPTIONS` in bench/scaling.py):",
        "",
        *assumptions_table(),
    ]
    write_section("\n".join(gen), quick=args.quick, no_docs=args.no_docs, doc=SCALING_DOC)
    last, big = weak[-1], strong[-1]
    figures = {
        "gpus_max": last["gpus"],
        "speedup_per_sample_min": min(p["speedup_per_sample"] for p in weak),
        "speedup_async_min": min(p["speedup_async"] for p in weak),
        "speedup_async_max": max(p["speedup_async"] for p in weak),
        "async_over_per_sample_min": min(p["per_sample"] / p["async"]["step"] for p in weak),
        "async_over_per_sample_max": max(p["per_sample"] / p["async"]["step"] for p in weak),
        "async_tokens_per_gpu_s": last["tokens"] / last["async"]["step"] / last["gpus"],
        "sync_share_max": last["limits"]["weight_sync"]["share"],
        "env_reward_cores_per_gpu": last["limits"]["env_cpu"]["cores_per_gpu"] + last["limits"]["reward"]["cores_per_gpu"],
        "strong_async_stale_share": big["limits"]["long_tail"]["stale_token_share"],
    }
    bench_section = [
        "## Scaling",
        "",
        f"`python bench/scaling.py` ({wall}): bench/rollout.py's cost-model engine and long-tail workload on a virtual "
        "clock, projected to a 7B model on H100-class GPUs. A projection, not a measurement: see docs/scaling.md for "
        "every assumption, the limits and the published numbers it is compared with.",
        "",
        *table(weak),
        "",
        "```",
        result_line(figures),
        "```",
    ]
    write_section("\n".join(bench_section), quick=args.quick, no_docs=args.no_docs)
    print(result_line(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
