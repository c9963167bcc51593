"""Running the `roll` CLI from integration tests and reading what a run wrote."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[2]


def cli_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    return env


def run_cli(args: list[str], timeout: float = 600, **popen_kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "roll", *args], cwd=REPO, env=cli_env(), capture_output=True,
                          text=True, timeout=timeout, **popen_kwargs)


def read_metrics(output_dir: Path) -> dict[int, dict[str, float]]:
    rows: dict[int, dict[str, float]] = {}
    with open(Path(output_dir) / "logs" / "metrics.jsonl") as f:
        for line in f:
            row = json.loads(line)
            rows.setdefault(int(row["step"]), {}).update(row)
    return rows


def check_run(out: Path, steps: int) -> dict[int, dict[str, float]]:
    """What every tiny agentic run must have written for ``steps`` steps: env and actor metrics
    of each step and the final checkpoint; returns the metrics by step."""
    from roll.utils.checkpoint import COMPLETE_MARKER

    metrics = read_metrics(out)
    for step in range(1, steps + 1):
        assert step in metrics, f"no metrics for step {step}"
        m = metrics[step]
        assert any(k.startswith("env/") and k.endswith("/success") for k in m), sorted(m)
        assert "actor/loss" in m or m.get("rollout/empty_batch") == 1.0
    ckpt = out / "checkpoints" / f"step-{steps}"
    assert (ckpt / COMPLETE_MARKER).exists()
    assert (ckpt / "actor_train" / "trainer_state.pt").exists()
    return metrics


def check_view(out: Path, report: Path | None = None) -> None:
    """`roll view` and the plots work on the run's output (docs/viewer.md); the report goes to
    ``report`` if given (a run shared with other tests is only read)."""
    from roll.viewer.report import build_report
    from roll.viewer.run_data import load_run

    data = load_run(out)
    assert data.trajectories and {t["kind"] for t in data.trajectories} == {"agentic"}
    assert all(t["turns"] and t["tokens"]["ids"] for t in data.trajectories)
    assert build_report(out, report).stat().st_size > 0
    assert (out / "plots" / "learning_curves.png").exists()


# A deterministic Sokoban run with a checkpoint after every step, no validation (and so no
# validation env workers to start). An entropy bonus keeps the weights moving even when every
# episode scores the same, so comparisons of resumed runs are sensitive to the restored weights,
# optimizer and seed streams. The trainer and the inference worker each have a device slot of
# their own (the disaggregated placement of tests/integration/test_agentic_pipeline.py).
# tests/integration/conftest.py runs it once for the session (with --verbose, for the metric dump
# of tests/integration/test_console_output.py: the stdout backend prints nothing without it) and
# once SIGKILLed while writing checkpoint step-3.
RESUMABLE = ["run", "configs/agentic/sokoban_cpu.yaml", "max_steps=3", "save_steps=1", "eval_steps=0",
             "val_env_manager=null", "deterministic=true", "algorithm.entropy_coef=0.05", "show_progress=false",
             "tracking.track_with=[stdout,jsonl]", "actor_train.device_mapping=[0]", "actor_infer.device_mapping=[1]",
             "actor_train.world_size=null", "actor_infer.world_size=null"]

# The default console of a short Sokoban run with validation at steps 0 and 2 (small batches,
# short answers: the console and the run's files are what is checked, not learning).
CONSOLE_SMALL = ["max_steps=2", "save_steps=0", "rollout_batch_size=4", "val_batch_size=4",
                 "actor_train.training_args.gradient_accumulation_steps=1",
                 "actor_infer.generating_args.max_new_tokens=8", "show_progress=true"]


KILLER = Path(__file__).with_name("kill_driver.py")
GRACE_S = 5.0
"""How long the run's processes may outlive its SIGKILLed driver."""


def run_killed(args: list[str], where: str) -> list[str]:
    """Run the CLI with ``args`` until the driver SIGKILLs itself at ``where`` (see
    tests/integration/kill_driver.py); return the names of the run's processes still alive
    ``GRACE_S`` seconds later (and kill those, so they do not leak into the next test)."""
    env = {**cli_env(), "ROLL_TEST_KILL": where}
    proc = subprocess.Popen([sys.executable, str(KILLER), *args], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    seen: dict[int, psutil.Process] = {}
    names: set[str] = set()
    driver = psutil.Process(proc.pid)
    deadline = time.monotonic() + 900
    while proc.poll() is None:  # record the run's processes while the driver lives
        try:
            for child in driver.children(recursive=True):
                seen.setdefault(child.pid, child)
                names.add(_name(child))  # each time: a new process is "python" until it execs
        except psutil.NoSuchProcess:
            break
        assert time.monotonic() < deadline, "the run did not reach the kill point"
        time.sleep(0.2)
    stderr = proc.stderr.read()
    assert proc.returncode == -signal.SIGKILL, (where, proc.returncode, stderr[-3000:])
    assert {"raylet", "gcs_server"} <= names, (where, names)  # the run's own local cluster was watched
    gone_by = time.monotonic() + GRACE_S
    while any(_alive(p) for p in seen.values()) and time.monotonic() < gone_by:
        time.sleep(0.2)
    left = [p for p in seen.values() if _alive(p)]
    for p in left:
        p.kill()
    return [f"{p.pid}:{_name(p)}" for p in left]


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _name(p: psutil.Process) -> str:
    try:
        return p.name()
    except psutil.Error:
        return "?"
