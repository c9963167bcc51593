"""One harness for the benches: ``python -m bench all [--quick]``, ``python -m bench NAME [ARGS]``,
``python -m bench list``.

Each bench runs in its own process, one after another (they measure the machine, so none runs
beside another), with ``--quick`` passed through: quick runs print and never rewrite docs, full
runs rewrite their own section of docs/benchmarks.md. The harness ends with every bench's
RESULT line and exits non-zero if any bench failed. gpu_check (needs a CUDA GPU) and the long
learning/main_job/soak chains run only when named.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ORDER = ["envs", "webshop", "sandbox", "rollout", "train_step", "model_update", "rlvr_learning", "learning", "main_job",
         "soak", "trl_compare", "trl_agentic", "async_e2e"]
NOT_IN_ALL = {"gpu_check", "learning", "soak", "rlvr_learning", "main_job", "trl_compare", "trl_agentic", "async_e2e"}
"""Needs a GPU, or a chain of training runs of many minutes even with --quick (trl_compare:
an SFT warm start, a pip install of TRL and two training runs; trl_agentic: the same on
FrozenLake, about 10 minutes with --quick on a busy 2-core machine; async_e2e: an SFT warm start
and two RL runs, each starting a vLLM engine)."""


def benches() -> list[str]:
    # *_probe.py are diagnostics (they print what a model learnt), not benchmarks
    found = {p.stem for p in HERE.glob("*.py") if p.stem not in ("__main__", "common") and not p.stem.endswith("_probe")}
    return [b for b in ORDER if b in found] + sorted(found - set(ORDER))


def run_one(name: str, args: list[str]) -> tuple[int, str, float]:
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, str(HERE / f"{name}.py"), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    result = ""
    assert proc.stdout is not None
    for line in proc.stdout:  # stream, keep the last RESULT line
        print(f"[{name}] {line}", end="", flush=True)
        if line.startswith("RESULT "):
            result = line.strip()
    return proc.wait(), result, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    p.add_argument("name", help="all, list, or a bench: " + ", ".join(benches()))
    p.add_argument("--quick", action="store_true", help="the same comparisons, small; docs are not touched")
    args, rest = p.parse_known_args(argv)
    if args.name == "list":
        for b in benches():
            print(b + ("  (run only when named)" if b in NOT_IN_ALL else ""))
        return 0
    names = [b for b in benches() if b not in NOT_IN_ALL] if args.name == "all" else [args.name]
    unknown = [n for n in names if n not in benches()]
    if unknown:
        p.error(f"unknown bench {unknown[0]!r}; choose from all, list, {', '.join(benches())}")
    extra = (["--quick"] if args.quick else []) + rest
    summary = []
    for name in names:
        rc, result, wall = run_one(name, extra)
        summary.append((name, rc, result, wall))
    print("\n== summary")
    for name, rc, result, wall in summary:
        status = "ok" if rc == 0 else f"FAILED (exit {rc})"
        print(f"{name}: {status}, {wall:.0f} s  {result or '(no RESULT line)'}")
    failed = [n for n, rc, _, _ in summary if rc != 0]
    print("RESULT " + " ".join([f"benches={len(summary)}", f"failed={len(failed)}"]
                               + [f"{n}_s={w:.0f}" for n, _, _, w in summary]))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
