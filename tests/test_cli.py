"""The `roll` command, run as a user runs it: a subprocess."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import roll

REPO = Path(__file__).resolve().parents[1]


def roll_cmd() -> list[str]:
    """The installed console script when there is one, else `python -m roll`."""
    script = Path(sys.executable).parent / "roll"
    if script.exists():
        return [str(script)]
    found = shutil.which("roll")
    return [found] if found else [sys.executable, "-m", "roll"]


def run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "HF_HUB_OFFLINE": "1", "NO_COLOR": "1", "COLUMNS": "200"}
    return subprocess.run([*roll_cmd(), *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO)


@pytest.fixture
def config(tmp_path) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(textwrap.dedent("""
        exp_name: cli_test
        max_steps: 1
        actor_train:
          training_args:
            lr: 1.0e-6
        custom_envs:
          sokoban:
            env_id: roll/Sokoban-v0
        train_env_manager:
          tags: [sokoban]
    """))
    return path


def test_typo_in_override_is_reported_without_traceback(config):
    result = run("run", str(config), "actor_train.trainig_args.lr=1")
    assert result.returncode != 0
    assert "trainig_args" in result.stderr and "training_args" in result.stderr
    assert "did you mean 'training_args'" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_config_errors_exit_nonzero_without_traceback(config, tmp_path):
    missing = run("run", str(tmp_path / "nope.yaml"))
    assert missing.returncode != 0 and "config file not found" in missing.stderr
    wrong_type = run("plan", str(config), "max_steps=many")
    assert wrong_type.returncode != 0 and "max_steps: expected int, got 'many'" in wrong_type.stderr
    bad_override = run("run", str(config), "max_steps")
    assert bad_override.returncode != 0 and "dotted.key=value" in bad_override.stderr
    for r in (missing, wrong_type, bad_override):
        assert "Traceback" not in r.stderr + r.stdout


def test_version():
    result = run("version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"roll {roll.__version__}"


def test_python_dash_m_matches_console_script():
    result = subprocess.run([sys.executable, "-m", "roll", "version"], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert result.returncode == 0 and result.stdout.strip() == f"roll {roll.__version__}"


def test_list_shows_every_registry():
    result = run("list")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for title in ("envs", "strategies", "advantages", "losses", "rewards", "filters", "trackers", "pipelines"):
        assert title in out
    for entry in ("tensorboard", "wandb", "jsonl", "agentic", "rlvr"):
        assert entry in out


def test_list_one_kind_and_unknown_kind():
    result = run("list", "trackers")
    assert result.returncode == 0
    assert all(t in result.stdout for t in ("stdout", "jsonl", "tensorboard", "wandb", "swanlab"))
    assert "pipelines" not in result.stdout
    bad = run("list", "trackerz")
    assert bad.returncode == 2 and "unknown kind 'trackerz'" in bad.stderr


@pytest.mark.integration
def test_model_tiny_writes_a_loadable_model(tmp_path):
    out = tmp_path / "tiny"
    result = run("model", "tiny", "--out", str(out), "--size", "tiny", "--seed", "1")
    assert result.returncode == 0, result.stderr
    assert str(out) in result.stdout
    from transformers import AutoConfig, AutoTokenizer

    assert AutoConfig.from_pretrained(out).model_type == "qwen2"
    assert AutoTokenizer.from_pretrained(out).decode(AutoTokenizer.from_pretrained(out).encode("#P√")) == "#P√"
