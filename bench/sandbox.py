"""Sandbox benchmark: executions per second and the per-run cost of isolation.

    python bench/sandbox.py            # 200 runs per measure, rewrites "## Sandbox" in docs/benchmarks.md
    python bench/sandbox.py --quick    # 40 runs per measure, same comparisons (< 60 s); prints only
    python bench/sandbox.py --quick --init python   # the same with the Python init (default: auto)

Measured side by side in one run, on the same program (read a line from stdin, print it):
  * plain `subprocess.run` of the system Python on a script written to a temp dir (the
    unisolated baseline), and the sandbox (bwrap namespaces + unprivileged user + seccomp
    filter + the sandbox's own init (compiled, or Python: reported as `init`) with the rlimits and the run's CPU count + the run's cgroup
    where one is delegated + capped output + wall-clock deadline), one after the other in
    alternation so machine load hits both alike;
  * executions per second at concurrency 1 and 2 (threads over a SandboxPool, and over a
    thread pool of plain subprocesses);
  * one code_sandbox reward call on a 4-case stdin/stdout problem (4 executions).
Per-run overhead = median sandbox wall time - median plain wall time (target: under 50 ms),
also as the best case (10th percentile) and as CPU time (this process and its children, which
does not depend on how loaded the machine is; wall time on a busy machine grows with the load
because the sandbox has more processes to schedule).
Last line: RESULT key=value ...
"""
from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from common import write_section

ROOT = Path(__file__).resolve().parents[1]
SECTION = "## Sandbox"
PROGRAM = "print(input())\n"
PYTHON = "/usr/bin/python3"


def plain_run(i: int) -> float:
    """The unisolated baseline: write the script, run it with pipes, read the output."""
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        Path(d, "main.py").write_text(PROGRAM)
        out = subprocess.run([PYTHON, "-B", "-s", "main.py"], input=f"{i}\n".encode(), capture_output=True,
                             cwd=d, timeout=30, env={"PATH": "/usr/bin:/bin"}, check=False)
    assert out.stdout == f"{i}\n".encode(), out
    return time.perf_counter() - t0


def sandbox_run(pool, i: int) -> float:
    t0 = time.perf_counter()
    r = pool.run_python(PROGRAM, stdin=f"{i}\n")
    assert r.ok and r.stdout == f"{i}\n", r
    return time.perf_counter() - t0


def cpu_s() -> float:
    """CPU time of this process and its reaped children (sequential runs only)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def p10(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 10]


def throughput(fn, n: int, concurrency: int) -> float:
    """Executions per second of ``fn(i)`` for i < n with ``concurrency`` threads."""
    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as ex:
        list(ex.map(fn, range(n)))
    return n / (time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="40 runs per measure instead of 200")
    ap.add_argument("--runs", type=int, default=None)
    ap.add_argument("--no-docs", action="store_true", help="do not rewrite docs/benchmarks.md (implied by --quick)")
    ap.add_argument("--init", choices=("auto", "c", "python"), default="auto",
                    help="the sandbox's init (SandboxConfig.init); the docs are rewritten only for auto")
    args = ap.parse_args(argv)
    n = args.runs or (40 if args.quick else 200)

    from roll.envs.code.problems import load_problems

    from roll.rewards.code import code_sandbox_reward
    from roll.sandbox import SandboxPool

    bench_start = time.perf_counter()
    pool1 = SandboxPool({"timeout_s": 30, "init": args.init}, max_concurrency=1)
    pool2 = SandboxPool({"timeout_s": 30, "init": args.init}, max_concurrency=2)
    mode = pool1.mode
    control = pool1.sandbox.resource_control
    init = pool1.sandbox.init
    for i in range(3):  # warm the page cache and the mode probe
        plain_run(i)
        sandbox_run(pool1, i)

    load_before = os.getloadavg()[0]
    plain_t, sandbox_t, plain_cpu, sandbox_cpu = [], [], 0.0, 0.0
    for i in range(n):  # alternate so load changes affect both sides alike
        c0 = cpu_s()
        plain_t.append(plain_run(i))
        c1 = cpu_s()
        sandbox_t.append(sandbox_run(pool1, i))
        c2 = cpu_s()
        plain_cpu += c1 - c0
        sandbox_cpu += c2 - c1
    plain_ms = statistics.median(plain_t) * 1e3
    sandbox_ms = statistics.median(sandbox_t) * 1e3
    overhead_ms = sandbox_ms - plain_ms
    overhead_p10_ms = (p10(sandbox_t) - p10(plain_t)) * 1e3
    plain_cpu_ms, sandbox_cpu_ms = plain_cpu / n * 1e3, sandbox_cpu / n * 1e3

    tput = {
        "plain_c1": throughput(plain_run, n, 1),
        "sandbox_c1": throughput(lambda i: sandbox_run(pool1, i), n, 1),
        "plain_c2": throughput(plain_run, n, 2),
        "sandbox_c2": throughput(lambda i: sandbox_run(pool2, i), n, 2),
    }

    problem = load_problems(ids=["sum-two"])[0]
    sample = {"response": f"```python\n{problem.solution}```"}
    reward_t = []
    for _ in range(max(5, n // 10)):
        t0 = time.perf_counter()
        out = code_sandbox_reward(sample, tests=problem.reward_tests(), max_concurrency=2)
        reward_t.append(time.perf_counter() - t0)
        assert out.score == 1.0
    reward_ms = statistics.median(reward_t) * 1e3
    elapsed = time.perf_counter() - bench_start

    res = {
        "isolation": mode,
        "resource_control": control,
        "init": init,
        "runs": n,
        "plain_ms": round(plain_ms, 2),
        "sandbox_ms": round(sandbox_ms, 2),
        "overhead_ms": round(overhead_ms, 2),
        "overhead_target_met": overhead_ms < 50.0,
        "plain_p10_ms": round(p10(plain_t) * 1e3, 2),
        "sandbox_p10_ms": round(p10(sandbox_t) * 1e3, 2),
        "overhead_p10_ms": round(overhead_p10_ms, 2),
        "plain_cpu_ms": round(plain_cpu_ms, 2),
        "sandbox_cpu_ms": round(sandbox_cpu_ms, 2),
        "overhead_cpu_ms": round(sandbox_cpu_ms - plain_cpu_ms, 2),
        "load_avg_1min": round(load_before, 1),
        "plain_exec_per_s_c1": round(tput["plain_c1"], 1),
        "sandbox_exec_per_s_c1": round(tput["sandbox_c1"], 1),
        "plain_exec_per_s_c2": round(tput["plain_c2"], 1),
        "sandbox_exec_per_s_c2": round(tput["sandbox_c2"], 1),
        "sandbox_vs_plain_c1": round(tput["sandbox_c1"] / tput["plain_c1"], 2),
        "sandbox_vs_plain_c2": round(tput["sandbox_c2"] / tput["plain_c2"], 2),
        "reward_4case_ms": round(reward_ms, 1),
        "elapsed_s": round(elapsed, 1),
    }
    print(f"isolation mode: {mode}; resource control: {control}; init: {init}; {n} runs per measure")
    print(f"median wall per run: plain {plain_ms:.1f} ms, sandbox {sandbox_ms:.1f} ms -> overhead {overhead_ms:.1f} ms "
          f"(p10: {overhead_p10_ms:.1f} ms; load average {load_before:.1f} on {os.cpu_count()} cores)")
    print(f"CPU per run: plain {plain_cpu_ms:.1f} ms, sandbox {sandbox_cpu_ms:.1f} ms -> overhead {sandbox_cpu_ms - plain_cpu_ms:.1f} ms")
    for c in (1, 2):
        print(f"concurrency {c}: plain {tput[f'plain_c{c}']:.1f}/s, sandbox {tput[f'sandbox_c{c}']:.1f}/s")
    print(f"code_sandbox reward, 4 stdin/stdout cases: {reward_ms:.1f} ms median")
    if not args.no_docs and args.init == "auto":
        write_docs(res, quick=args.quick)  # a --quick run prints only (bench/common.py)
    print("RESULT " + " ".join(f"{k}={v}" for k, v in res.items()))
    return res


def write_docs(res: dict, quick: bool) -> None:
    cmd = "python bench/sandbox.py" + (" --quick" if quick else "")
    lines = [
        SECTION,
        "",
        (f"`{cmd}` ({res['runs']} runs per measure, {res['elapsed_s']} s; {platform.machine()}, "
        f"{os.cpu_count()} CPU cores shared with other work, 1-minute load average {res['load_avg_1min']} at the start, Python {platform.python_version()} driver, "
        f"isolation mode `{res['isolation']}`, resource control `{res['resource_control']}`, init `{res['init']}`, seccomp filter on). The program reads a line and prints it; the baseline "
        f"is plain `subprocess.run` of the same system Python on the same script, measured in "
        f"alternation with the sandbox in the same run."),
        "",
        "| measure | plain subprocess | sandbox | ratio |",
        "|---|---|---|---|",
        (f"| median wall time per run | {res['plain_ms']} ms | {res['sandbox_ms']} ms | "
         f"overhead **{res['overhead_ms']} ms** per run (target < 50 ms: {'met' if res['overhead_target_met'] else 'NOT met'}) |"),
        f"| 10th percentile wall time per run | {res['plain_p10_ms']} ms | {res['sandbox_p10_ms']} ms | overhead {res['overhead_p10_ms']} ms |",
        f"| CPU time per run (parent + children) | {res['plain_cpu_ms']} ms | {res['sandbox_cpu_ms']} ms | overhead {res['overhead_cpu_ms']} ms |",
        f"| executions/s, concurrency 1 | {res['plain_exec_per_s_c1']} | {res['sandbox_exec_per_s_c1']} | {res['sandbox_vs_plain_c1']}x |",
        f"| executions/s, concurrency 2 | {res['plain_exec_per_s_c2']} | {res['sandbox_exec_per_s_c2']} | {res['sandbox_vs_plain_c2']}x |",
        f"| code_sandbox reward, 4 stdin/stdout cases (4 executions, 2 at a time) | | {res['reward_4case_ms']} ms | |",
        "",
        ("The sandbox's cost is `setpriv`, bwrap setting up the namespaces and mounts and loading the "
         "seccomp filter, then the sandbox's init (`c`: roll/sandbox/init.c, compiled at first use into a "
         "small static binary; `python`, the fallback where no C compiler is available: "
         "roll/sandbox/init.py, a second start of the system Python, about 12 ms more CPU per run, "
         "measured by `python bench/sandbox.py --quick --init python`), all before the program. On a "
         "loaded machine every exec and namespace setup slows down with the load, so the overhead "
         "measured here is an upper bound of the idle-machine figure."),
        "",
    ]
    write_section("\n".join(lines), quick=quick)


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
