"""Weight sync (ModelUpdateGroup) time against the memory-copy bound, on CPU Ray.

    python bench/model_update.py            # tiny kit "small" (~10M) and "medium" (~50M) models
    python bench/model_update.py --quick    # "small" only, fewer repeats (< 60 s after Ray starts)

One trainer rank (torch_train, DDP) holds the model; one inference worker (hf_infer) is
colocated with it (same device slot: the shared-memory path) and one is disaggregated (another
slot: the gloo broadcast path). Each path has its own ModelUpdateGroup and is timed
end to end (``update()``) and trainer-side only (``send_s``). Colocated: the one-call locked
path (the driver calls trainer rank 0 once; it locks the receiver's shared-memory block,
gathers, copies, writes the version) and, in the same run, the staged path it replaced
(pause generation, send, publish and check the version: three Ray round trips). Broadcast:
staged (pause, gather + flatten + broadcast, publish).

Bound: the bytes of one model copy divided by this machine's memcpy bandwidth, measured in
the same run (``torch.Tensor.copy_`` between two buffers of the model's size, best of N).
Times are best of N for both sides. ``ratio = sync time / bound`` (target: within 3x on CPU
for the colocated path). After every size, the inference workers' logprobs on fixed tokens
are compared with the trainer's (max abs difference).
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Same conditions for both sides of the ratio. This process times memcpy on all cores between
# the updates: OpenMP workers that keep spinning after each copy (libgomp's default) would take
# a core from the update that follows. And Ray starts its workers at niceness 15: on a shared
# machine other work would then starve the update but not the bound, timed at niceness 0.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("RAY_worker_niceness", "0")

import torch

from common import write_section

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "benchmarks.md"
SECTION = "## Model update"


class Memcpy:
    """Times one model-sized buffer copy; sampled between the updates so that both sides see
    the same machine load (the CPUs are shared with other work)."""

    def __init__(self, nbytes: int):
        self.src = torch.ones(nbytes, dtype=torch.uint8)
        self.dst = torch.empty(nbytes, dtype=torch.uint8)
        self.dst.copy_(self.src)  # touch the pages first
        self.best = float("inf")

    def sample(self) -> None:
        t0 = time.perf_counter()
        self.dst.copy_(self.src)
        self.best = min(self.best, time.perf_counter() - t0)


def bench_size(size: str, repeats: int) -> dict:
    from roll.config.roles import StrategyArgs, WorkerConfig
    from roll.config.schema import ResourcesConfig
    from roll.data.batch import Batch
    from roll.distributed.cluster import Cluster
    from roll.distributed.model_update import ModelUpdateGroup
    from roll.distributed.resource_pool import ResourcePool
    from roll.models.tiny import tiny_model_path
    from roll.workers.actor import ActorWorker
    from roll.workers.inference import InferenceWorker

    path = tiny_model_path(size)
    train_cfg = WorkerConfig(model_name_or_path=path, device_mapping=[0], strategy_args=StrategyArgs("torch_train", {"parallel": "ddp"}))
    colo_cfg = WorkerConfig(model_name_or_path=path, device_mapping=[0])
    remote_cfg = WorkerConfig(model_name_or_path=path, device_mapping=[1])
    pool = ResourcePool(ResourcesConfig(device="cpu"), {"actor_train": train_cfg, "actor_infer": colo_cfg, "actor_infer_remote": remote_cfg})
    clusters = [Cluster("actor_train", ActorWorker, train_cfg, pool), Cluster("actor_infer", InferenceWorker, colo_cfg, pool),
                Cluster("actor_infer_remote", InferenceWorker, remote_cfg, pool)]
    train, colo, remote = clusters
    try:
        out: dict = {"size": size}
        groups = {}
        for name, infer in (("colocated", colo), ("staged", colo), ("broadcast", remote)):
            mu = ModelUpdateGroup(train, [infer])
            assert set(mu.paths.values()) == {"broadcast" if name == "broadcast" else "colocated"}, mu.paths
            assert mu.fast_path == (name != "broadcast"), "the colocated worker should get the one-call locked path"
            if name == "staged":
                mu.fast_path = False  # the three-round-trip path it replaced, for comparison
            groups[name] = mu
        version = 0
        for mu in groups.values():  # warm-up: first-touch of buffers, gloo connection set-up
            version += 1
            out["bytes"] = int(mu.update(version)["model_update/bytes"])
        memcpy = Memcpy(out["bytes"])
        totals = {name: [] for name in groups}
        sends = {name: [] for name in groups}
        for _ in range(repeats):  # the paths alternate so that each sees the same machine load
            for name, mu in groups.items():
                memcpy.sample()
                version += 1
                m = mu.update(version)
                assert m["model_update/fast_path"] == float(name == "colocated"), m
                totals[name].append(m["model_update/time_s"])
                sends[name].append(m["model_update/send_s"])
        memcpy.sample()
        for name in groups:
            out[f"{name}_s"] = min(totals[name])
            out[f"{name}_send_s"] = min(sends[name])
            if os.environ.get("ROLL_BENCH_DEBUG"):
                print(name, [round(t * 1e3, 2) for t in totals[name]], [round(t * 1e3, 2) for t in sends[name]])
        out["memcpy_s"] = memcpy.best
        g = torch.Generator().manual_seed(0)
        ids = torch.randint(3, 3000, (2, 32), generator=g)
        probe = Batch({"input_ids": ids, "attention_mask": torch.ones_like(ids)})
        ref = train.call("compute_logprobs", probe, mode="dp")["old_logprobs"]
        out["max_logprob_diff"] = max(float((c.call("compute_logprobs", probe, mode="rank0")["infer_logprobs"] - ref).abs().max())
                                      for c in (colo, remote))
        return out
    finally:
        for c in clusters:
            c.shutdown()
        pool.shutdown()


def write_docs(rows: list[dict], args: argparse.Namespace, wall_s: float) -> None:
    lines = [SECTION, "",
             (f"`python bench/model_update.py{' --quick' if args.quick else ''}` ({wall_s:.0f} s, {platform.machine()}, "
              f"Python {platform.python_version()}, torch {torch.__version__}, {os.cpu_count()} CPU cores shared with other work, "
              f"1-minute load average {args.load_avg:.1f} at the start, {os.getloadavg()[0]:.1f} at the end). "
              "One trainer rank (torch_train DDP) -> one hf_infer worker per path, CPU Ray, bucket 256 MB; the paths "
              f"alternate, best of {args.repeats} updates each. Bound = model bytes / memcpy bandwidth measured in the same run."), "",
             "| model | params | bytes | memcpy bound | colocated, one call | ratio | trainer-side send | colocated, staged (3 round trips) | ratio | broadcast (gloo) | ratio | max logprob diff after sync |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        bound = r["memcpy_s"]
        lines.append(f"| {r['size']} | {r['bytes'] / 4 / 1e6:.1f}M | {r['bytes'] / 2**20:.0f} MiB | {bound * 1e3:.1f} ms | "
                     f"{r['colocated_s'] * 1e3:.1f} ms | **{r['colocated_s'] / bound:.2f}x** | {r['colocated_send_s'] * 1e3:.1f} ms "
                     f"({r['colocated_send_s'] / bound:.2f}x) | {r['staged_s'] * 1e3:.1f} ms | {r['staged_s'] / bound:.2f}x | "
                     f"{r['broadcast_s'] * 1e3:.1f} ms | {r['broadcast_s'] / bound:.2f}x | {r['max_logprob_diff']:.1e} |")
    verdict = []
    for r in rows:
        e2e, send = r["colocated_s"] / r["memcpy_s"], r["colocated_send_s"] / r["memcpy_s"]
        verdict.append(f"{r['size']}: end to end {e2e:.2f}x ({'met' if e2e <= 3 else 'not met'}), "
                       f"trainer-side {send:.2f}x, {r['staged_s'] / r['colocated_s']:.2f}x faster than staged")
    lines += ["", "Target (colocated within 3x of the bound): " + "; ".join(verdict) + "."]
    lines += ["", ("What changed: the colocated update is one driver call. The synchronisation moved into the "
                   "inference worker's shared-memory weight block: a 64-byte header (version, pause_requested, pid) "
                   "and fcntl.flock on the block's file. Every decode batch and logprobs call holds the shared lock and "
                   "reads the version right after taking it; trainer rank 0 flags the block, takes the exclusive lock "
                   "(waiting for a running batch), checks the receiver's pid is alive, copies, writes the version and "
                   "unlocks. The staged path (pause, send, publish-and-resume: three sequential Ray round trips of about "
                   "0.7-1 ms each on this machine, more under load) remains for broadcast, CUDA IPC and mixed "
                   "topologies, and as the fallback that relinks a restarted worker; its column above is the same "
                   "colocated worker driven that way, in the same run. What is left above the trainer-side send is "
                   "one driver -> trainer round trip; the send itself is a one-thread copy against a bound measured "
                   "with every core.")]
    lines += ["", ("Evaluated earlier for the round trips, not adopted: submitting the three stages at once as a Ray "
                   "dependency chain (8.3 against 7.8 ms best of 48; Ray relays every result through the owner of its "
                   "ref, so chaining removes no message from the critical path), a finish that the trainer completes "
                   "with a direct call (about 1 ms slower), and a 2-thread copy on the paused workers' cores (2.4x "
                   "slower than one thread while another process held the second core). The driver's OpenMP workers "
                   "do not spin after each memcpy sample (OMP_WAIT_POLICY=PASSIVE) and Ray's workers run at the "
                   "driver's priority (RAY_worker_niceness=0), so both sides of the ratio see the same conditions.")]
    lines += ["", ("Broadcast (disaggregated workers): buckets are flattened into a reused byte buffer and broadcast "
                   "over a dedicated gloo group (loopback TCP here, whose bandwidth rather than memcpy bounds this path), "
                   "then copied into the weights, with the staged pause and publish around it."), ""]
    write_section("\n".join(lines), quick=args.quick)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small model only, 3 repeats")
    p.add_argument("--sizes", nargs="*", default=None, help="tiny kit sizes (default: small medium; quick: small)")
    p.add_argument("--repeats", type=int, default=None)
    p.add_argument("--no-docs", action="store_true", help="do not rewrite docs/benchmarks.md")
    args = p.parse_args()
    args.sizes = args.sizes or (["small"] if args.quick else ["small", "medium"])
    args.repeats = args.repeats or (3 if args.quick else 5)
    import ray

    sys.path.insert(0, str(ROOT))
    args.load_avg = os.getloadavg()[0]
    t0 = time.perf_counter()
    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"RAY_AUTH_MODE": "disabled", "HF_HUB_OFFLINE": "1"}})
    try:
        rows = [bench_size(s, args.repeats) for s in args.sizes]
    finally:
        ray.shutdown()
    wall = time.perf_counter() - t0
    for r in rows:
        print(f"{r['size']}: {r['bytes'] / 2**20:.0f} MiB, memcpy bound {r['memcpy_s'] * 1e3:.1f} ms, "
              f"colocated {r['colocated_s'] * 1e3:.1f} ms ({r['colocated_s'] / r['memcpy_s']:.2f}x; send {r['colocated_send_s'] * 1e3:.1f} ms), "
              f"colocated staged {r['staged_s'] * 1e3:.1f} ms ({r['staged_s'] / r['memcpy_s']:.2f}x), "
              f"broadcast {r['broadcast_s'] * 1e3:.1f} ms ({r['broadcast_s'] / r['memcpy_s']:.2f}x), logprob diff {r['max_logprob_diff']:.1e}")
    if not args.no_docs:
        write_docs(rows, args, wall)  # a --quick run prints only (bench/common.py)
    result = {"wall_s": f"{wall:.0f}"}
    for r in rows:
        result[f"{r['size']}_colocated_ratio"] = f"{r['colocated_s'] / r['memcpy_s']:.2f}"
        result[f"{r['size']}_staged_ratio"] = f"{r['staged_s'] / r['memcpy_s']:.2f}"
        result[f"{r['size']}_broadcast_ratio"] = f"{r['broadcast_s'] / r['memcpy_s']:.2f}"
        result[f"{r['size']}_logprob_diff"] = f"{r['max_logprob_diff']:.1e}"
    print("RESULT " + " ".join(f"{k}={v}" for k, v in result.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
