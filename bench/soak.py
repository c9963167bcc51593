"""Soak: the tiny agentic pipeline for many steps with worker processes killed every few steps.

    python bench/soak.py            # 200 steps, rewrites "## Soak" in docs/benchmarks.md
    python bench/soak.py --quick    # 16 steps, same faults (prints only)

One driver process runs `roll run configs/agentic/sokoban_cpu.yaml` in-process (so the local
Ray cluster is its child and only its workers are touched) while a thread SIGKILLs a random
worker process (env host, inference worker or trainer rank) every ``--every`` finished steps. Env hosts and inference workers are restarted by the run itself; a killed trainer rank
stops the run cleanly (its optimizer state is gone), and the soak resumes it from the latest
checkpoint, as a user would (``resume_from_checkpoint=true``). A sampler records the resident
memory (RSS) of every worker role each second; the RSS slope per role (MB per 100 steps, least
squares over the steps each process lived) shows leaks that survive restarts.

Pass: every one of the steps completes (possibly after resumes), at most one step is lost per
resume, and no stop is anything but a clean, expected failure. Last line: RESULT key=value ...
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from common import write_section  # noqa: E402

DOCS = ROOT / "docs" / "benchmarks.md"
CONFIG = ROOT / "configs" / "agentic" / "sokoban_cpu.yaml"
SAMPLED_ROLES = ("env", "infer", "train")


def _steps_done(out: Path) -> int:
    path = out / "logs" / "metrics.jsonl"
    if not path.exists():
        return 0
    done = 0
    for line in path.read_text().splitlines():
        try:
            done = max(done, int(json.loads(line).get("step", 0)))
        except (ValueError, json.JSONDecodeError):
            continue  # a line cut by a kill of the driver is not ours to judge here
    return done


class RssSampler:
    """Per role and pid: (step, rss MB) samples, once a second."""

    def __init__(self, out: Path):
        self.out = out
        self.samples: dict[str, dict[int, list[tuple[int, float]]]] = defaultdict(lambda: defaultdict(list))
        self.driver: list[tuple[int, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        import psutil

        from roll.distributed.chaos import ROLE_CLASSES, worker_processes

        me = psutil.Process()
        while not self._stop.wait(1.0):
            step = _steps_done(self.out)
            for role in SAMPLED_ROLES:
                for p in worker_processes(ROLE_CLASSES[role]):
                    try:
                        self.samples[role][p.pid].append((step, p.memory_info().rss / 2**20))
                    except Exception:  # the process died between listing and reading
                        continue
            self.driver.append((step, me.memory_info().rss / 2**20))

    def start(self) -> "RssSampler":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    @staticmethod
    def _slope(points: list[tuple[int, float]]) -> tuple[float, float]:
        """Least-squares MB per step and the number of steps covered."""
        xs = [x for x, _ in points]
        if len(points) < 3 or max(xs) == min(xs):
            return 0.0, 0.0
        mx, my = sum(xs) / len(xs), sum(y for _, y in points) / len(points)
        sxx = sum((x - mx) ** 2 for x in xs)
        return sum((x - mx) * (y - my) for x, y in points) / sxx, float(max(xs) - min(xs))

    def slopes(self) -> dict[str, float]:
        """MB per 100 steps per role: each process's own slope (a restart starts a new one,
        with its warm-up excluded: samples from its second step on), weighted by the steps it
        covered."""
        out = {}
        for role in SAMPLED_ROLES:
            total, weight = 0.0, 0.0
            for points in self.samples[role].values():
                first = points[0][0] if points else 0
                slope, span = self._slope([p for p in points if p[0] > first + 1])
                total, weight = total + slope * span, weight + span
            out[role] = 100 * total / weight if weight else float("nan")
        slope, _ = self._slope([p for p in self.driver if p[0] > 2])
        out["driver"] = 100 * slope
        return out


class StepChaos:
    """Kills a random target's worker every ``every_steps`` finished steps (as logged), a random
    moment into the next step, so faults land in rollout, training and weight sync alike, and
    never while a segment is still starting (that would only test start-up, over and over)."""

    def __init__(self, out: Path, targets: list[str], every_steps: int, seed: int):
        import random

        from roll.distributed.chaos import FaultEvent

        self.out, self.targets, self.every = out, targets, every_steps
        self.rng = random.Random(seed)
        self.events: list[FaultEvent] = []
        self._event_cls = FaultEvent
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._t0 = time.monotonic()

    def __enter__(self) -> "StepChaos":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _loop(self) -> None:
        from roll.distributed.chaos import ROLE_CLASSES, kill_worker

        last_kill_step = 0
        while not self._stop.wait(0.2):
            done = _steps_done(self.out)
            if done - last_kill_step < self.every:
                continue
            if self._stop.wait(self.rng.uniform(0.0, 4.0)):  # somewhere into the next step
                return
            if _steps_done(self.out) != done:
                continue  # the step ended meanwhile: wait for the next window
            target = self.rng.choice(self.targets)
            pid = kill_worker(ROLE_CLASSES.get(target, target), self.rng)
            self.events.append(self._event_cls(time.monotonic() - self._t0, target, pid))
            last_kill_step = done


def run(steps: int, every_steps: int, seed: int, out: Path, targets: list[str]) -> dict:
    from roll.cli import main as roll_main

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    overrides = [f"max_steps={steps}", "save_steps=1", "max_ckpt_to_keep=2", "eval_steps=0", "show_progress=false",
                 f"output_dir={out}", "resume_from_checkpoint=true", f"seed={seed}", "tracking.dump_trajectories=0"]
    t0 = time.perf_counter()
    sampler = RssSampler(out).start()
    stops: list[dict] = []
    with StepChaos(out, targets, every_steps=every_steps, seed=seed) as monkey:
        while True:
            before = _steps_done(out)
            try:
                rc = roll_main(["run", str(CONFIG), *overrides])
            except Exception as e:  # an unexpected crash: recorded and the soak fails
                rc = -1
                stops.append({"step": _steps_done(out), "rc": rc, "error": f"{type(e).__name__}: {e}"[:300]})
                break
            done = _steps_done(out)
            if rc == 0 and done >= steps:
                break
            # logged steps the resume will run again (the step in flight at the kill is not
            # counted: it never finished)
            stops.append({"step": done, "rc": rc, "steps_this_segment": done - before,
                          "lost": max(done - _checkpoint_step(out), 0)})
            if len(stops) > 4 * steps:
                break
    sampler.stop()
    wall = time.perf_counter() - t0
    lost = max((s.get("lost", 0) for s in stops), default=0)
    return {"steps": _steps_done(out), "target_steps": steps, "wall_s": wall, "faults": monkey.events,
            "stops": stops, "lost_steps": lost, "rss_slopes": sampler.slopes()}


def _checkpoint_step(out: Path) -> int:
    pointer = out / "checkpoints" / "latest"
    try:
        return int(pointer.read_text().strip().removeprefix("step-"))
    except (OSError, ValueError):
        return 0


def report(r: dict, args: argparse.Namespace) -> str:
    kills = [e for e in r["faults"] if e.pid]
    by_target = defaultdict(int)
    for e in kills:
        by_target[e.target] += 1
    slopes = r["rss_slopes"]
    lines = ["## Soak", "",
             f"`python bench/soak.py` (seed {args.seed}): {r['target_steps']} steps of configs/agentic/sokoban_cpu.yaml "
             f"(checkpoint every step) with a worker process SIGKILLed every {args.every} finished steps, "
             "a random moment into the next step.", "",
             f"- steps completed: {r['steps']} of {r['target_steps']}, wall {r['wall_s']:.0f} s",
             f"- processes killed: {len(kills)} ({', '.join(f'{k} {v}' for k, v in sorted(by_target.items()))})",
             f"- clean stops and resumes: {len(r['stops'])} (exit codes "
             f"{sorted({s['rc'] for s in r['stops']})}); most logged steps lost by one stop: {r['lost_steps']}",
             "- RSS slope per role, MB per 100 steps (per process, restarts excluded): "
             + ", ".join(f"{k} {v:+.1f}" for k, v in slopes.items()), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="16 steps; prints only")
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--every", type=int, default=3, help="finished steps between kills")
    p.add_argument("--targets", nargs="+", default=["env", "infer", "train"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    steps = args.steps or (16 if args.quick else 200)
    out = Path(args.out or ROOT / "output" / "soak" / ("quick" if args.quick else "full"))
    if out.exists():
        import shutil

        shutil.rmtree(out)
    r = run(steps, args.every, args.seed, out, args.targets)
    text = report(r, args)
    print(text)
    write_section(text, quick=args.quick)
    ok = r["steps"] >= steps and r["lost_steps"] <= 1 and all(s["rc"] not in (-1, 0) for s in r["stops"])
    slopes = r["rss_slopes"]
    print("RESULT " + " ".join([f"soak_ok={int(ok)}", f"steps={r['steps']}", f"kills={sum(1 for e in r['faults'] if e.pid)}",
                                f"resumes={len(r['stops'])}", f"max_lost_steps={r['lost_steps']}", f"wall_s={r['wall_s']:.0f}"]
                               + [f"rss_slope_mb_per_100_steps_{k}={v:.1f}" for k, v in slopes.items()]))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
