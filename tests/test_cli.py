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


# ---- expected failures, run.log, --verbose ------------------------------------------------------
USER_PIPELINES = '''
import errno
from roll.data.rlvr import DataError
from roll.registry import PIPELINES
from roll.utils.logging import get_logger


class _Base:
    def __init__(self, cfg):
        self.cfg = cfg

    def run(self):
        get_logger("roll.pipelines.user").info("user pipeline started: step 1")
        self.fail()


class DataFails(_Base):
    def fail(self):
        raise DataError("prompts.jsonl:3: not valid JSON (Expecting value)")


class DiskFull(_Base):
    def fail(self):
        try:
            raise OSError(errno.ENOSPC, "No space left on device", "/ckpt/step-4/model.safetensors")
        except OSError as e:
            raise RuntimeError("checkpoint write failed") from e


class Bug(_Base):
    def fail(self):
        return 1 / 0


PIPELINES.register("user_data_fails", DataFails)
PIPELINES.register("user_disk_full", DiskFull)
PIPELINES.register("user_bug", Bug)
'''


def run_user_pipeline(tmp_path, pipeline: str, *extra: str) -> tuple[subprocess.CompletedProcess, Path]:
    """`roll run` of a pipeline from the user's own module (imported by `imports:`): the real
    CLI path, without Ray or a model."""
    (tmp_path / "user_pipelines.py").write_text(USER_PIPELINES)
    out = tmp_path / "run"
    cfg = tmp_path / "user.yaml"
    cfg.write_text(f"pipeline: {pipeline}\nimports: [user_pipelines]\noutput_dir: {out}\nrollout_batch_size: 8\n")
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "NO_COLOR": "1",
           "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([*roll_cmd(), "run", str(cfg), *extra], capture_output=True, text=True, timeout=120, env=env, cwd=REPO)
    return proc, out / "run.log"


def test_expected_failure_is_one_message_and_the_traceback_is_in_run_log(tmp_path):
    proc, log = run_user_pipeline(tmp_path, "user_data_fails")
    assert proc.returncode == 1
    messages = [ln for ln in proc.stderr.splitlines() if ln.startswith("roll: ")]  # the rest: the driver's log lines
    assert messages == ["roll: prompts.jsonl:3: not valid JSON (Expecting value)",
                        f"roll: the traceback and the run's log are in {log}"], proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    text = log.read_text()
    assert "user pipeline started: step 1" in text  # the driver's log lines
    assert "Traceback" in text and "DataError: prompts.jsonl:3" in text and "user_pipelines.py" in text
    # --verbose: the traceback on the console too; the log of the first run is kept
    proc, log = run_user_pipeline(tmp_path, "user_data_fails", "--verbose")
    assert proc.returncode == 1
    assert "Traceback" in proc.stderr and "roll: prompts.jsonl:3: not valid JSON" in proc.stderr
    assert log.read_text().count("==== roll ") == 2 and log.read_text().count("DataError: prompts.jsonl:3") == 2


def test_disk_full_is_an_expected_failure(tmp_path):
    proc, log = run_user_pipeline(tmp_path, "user_disk_full")
    assert proc.returncode == 1
    assert "roll: I/O error /ckpt/step-4/model.safetensors: No space left on device" in proc.stderr.splitlines()
    assert "Traceback" not in proc.stderr
    assert "OSError" in log.read_text()


def test_a_bug_keeps_its_traceback_on_the_console(tmp_path):
    proc, log = run_user_pipeline(tmp_path, "user_bug")
    assert proc.returncode == 1
    assert "Traceback" in proc.stderr and "ZeroDivisionError" in proc.stderr
    assert "ZeroDivisionError" in log.read_text()


def test_unwritable_output_dir_is_a_message(tmp_path, config):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = run("run", str(config), f"output_dir={blocker}/run")
    assert result.returncode == 2
    assert f"output_dir: {blocker}/run cannot be created: {blocker} is not a directory" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


# ---- user envs: roll envs list / check --import ---------------------------------------------------
USER_ENVS = '''
import gymnasium as gym
from roll.envs.base import UnicodeText
from roll.envs.parsing import extract_answer


class Count(gym.Env):
    metadata = {"render_modes": []}
    action_words = ("go",)

    def __init__(self, target=3, int_obs=False):
        self.observation_space = UnicodeText(64)
        self.action_space = UnicodeText()
        self.target, self.int_obs, self.count, self.turn = target, int_obs, 0, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.count = self.turn = 0
        return "count 0", {"instruction": "Answer <answer>go</answer>."}

    def step(self, action):
        parsed = extract_answer(action)
        valid = parsed.valid and parsed.answer.lower() == "go"
        self.count += valid
        self.turn += 1
        done = self.count >= self.target
        info = {"success": done, "action_is_valid": valid, "action_is_effective": valid}
        obs = self.count if (self.int_obs and self.count == 2) else f"count {self.count}"
        return obs, float(valid), done, self.turn >= 10, info


gym.register("userproj/Count-v0", entry_point=Count)
gym.register("userproj/BrokenCount-v0", entry_point=Count, kwargs={"int_obs": True})
'''


def _user_env_module(tmp_path) -> dict[str, str]:
    (tmp_path / "user_envs.py").write_text(USER_ENVS)
    return {**os.environ, "NO_COLOR": "1", "COLUMNS": "200", "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}


def test_envs_list_shows_user_envs(tmp_path):
    env = _user_env_module(tmp_path)
    listed = subprocess.run([*roll_cmd(), "envs", "list", "--import", "user_envs"], capture_output=True, text=True, timeout=120, env=env, cwd=REPO)
    assert listed.returncode == 0, listed.stderr
    assert "userproj/Count-v0" in listed.stdout and "roll/Sokoban-v0" in listed.stdout
    plain = subprocess.run([*roll_cmd(), "envs", "list"], capture_output=True, text=True, timeout=120, env=env, cwd=REPO)
    assert "userproj/Count-v0" not in plain.stdout
    missing = subprocess.run([*roll_cmd(), "envs", "list", "--import", "no_such_user_module"], capture_output=True, text=True,
                             timeout=120, env=env, cwd=REPO)
    assert missing.returncode == 2 and "no_such_user_module" in missing.stderr and "Traceback" not in missing.stderr


def test_envs_check_runs_the_checker_on_user_envs(tmp_path):
    env = _user_env_module(tmp_path)
    good = subprocess.run([*roll_cmd(), "envs", "check", "userproj/Count-v0", "--import", "user_envs"],
                          capture_output=True, text=True, timeout=120, env=env, cwd=REPO)
    assert good.returncode == 0, good.stdout + good.stderr
    assert "passed the text-env checks" in good.stdout
    bad = subprocess.run([*roll_cmd(), "envs", "check", "userproj/BrokenCount-v0", "--import", "user_envs"],
                         capture_output=True, text=True, timeout=120, env=env, cwd=REPO)
    assert bad.returncode == 1 and "observation is int, not str" in bad.stdout
