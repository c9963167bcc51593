"""`roll envs play` run as a user runs it, for the env tests that type into it."""
from __future__ import annotations

import os
import subprocess
import sys


def play_cli(*args: str, typed: str, cwd: str, pythonpath: str | None = None) -> subprocess.CompletedProcess:
    """``python -m roll envs play ARGS`` in ``cwd`` with ``typed`` as its input (text, captured);
    ``pythonpath`` is added to the environment for envs from the user's own package."""
    env = {**os.environ, "PYTHONPATH": pythonpath} if pythonpath else None
    return subprocess.run([sys.executable, "-m", "roll", "envs", "play", *args], input=typed, capture_output=True,
                          text=True, timeout=120, cwd=cwd, env=env)
