"""Running the `roll` CLI from integration tests and reading what a run wrote."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

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


# A deterministic Sokoban run with a checkpoint after every step, no validation (and so no
# validation env workers to start). An entropy bonus keeps the weights moving even when every
# episode scores the same, so comparisons of resumed runs are sensitive to the restored weights,
# optimizer and seed streams. tests/integration/conftest.py runs it once for the session.
RESUMABLE = ["run", "configs/agentic/sokoban_cpu.yaml", "max_steps=3", "save_steps=1", "eval_steps=0",
             "val_env_manager=null", "deterministic=true", "algorithm.entropy_coef=0.05", "show_progress=false",
             "tracking.track_with=[jsonl]"]

# The default console of a short Sokoban run with validation at steps 0 and 2 (small batches,
# short answers: the console and the run's files are what is checked, not learning).
CONSOLE_SMALL = ["max_steps=2", "save_steps=0", "rollout_batch_size=4", "val_batch_size=4",
                 "actor_train.training_args.gradient_accumulation_steps=1",
                 "actor_infer.generating_args.max_new_tokens=8", "show_progress=true"]
