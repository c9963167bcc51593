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
