"""`roll run` on a user's broken env (registered through `imports:`), as a new user meets it:
a non-zero exit, one line naming the env and the error, the traceback in the run directory,
and no checkpoint or final model from a run that trained nothing; and a run whose rewards never
vary, told at its end that it learnt nothing from them."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from .helpers import REPO, cli_env

pytestmark = pytest.mark.integration

PLUGIN = '''
import gymnasium
from gymnasium import spaces


class RaisesOnTurn3(gymnasium.Env):
    metadata = {"render_modes": []}

    def __init__(self):
        self.observation_space = spaces.Text(max_length=100)
        self.action_space = spaces.Text(max_length=100)
        self.turn = 0

    def reset(self, seed=None, options=None):
        self.turn = 0
        return "start", {}

    def step(self, action):
        self.turn += 1
        if self.turn == 3:
            return {"board": None}["board"].strip()  # the bug: on turn 3, every episode
        return f"turn {self.turn}", 0.0, False, False, {}


gymnasium.register(id="usertest/RaisesOnTurn3-v0", entry_point=RaisesOnTurn3, disable_env_checker=True)
'''


def run_user_env(tmp_path, plugin: str, tag: str, env_id: str, max_turns: int, save_steps: int = 0):
    """`roll run` of a 2-step agentic config on a user's env, registered by ``plugin`` (its
    module source) through `imports:`: (the run directory, the finished process)."""
    (tmp_path / "user_env_plugin.py").write_text(plugin)
    out = tmp_path / "run"
    config = tmp_path / "user.yaml"
    config.write_text(textwrap.dedent(f"""
        defaults: [{REPO / "configs/agentic/base_cpu.yaml"}]
        imports: [user_env_plugin]
        max_steps: 2
        save_steps: {save_steps}
        eval_steps: 0
        show_progress: false
        output_dir: {out}
        custom_envs:
          {tag}: {{env_id: {env_id}, max_turns: {max_turns}}}
        train_env_manager: {{tags: [{tag}], group_size: 2}}
        actor_infer: {{generating_args: {{max_new_tokens: 4}}}}
        """))
    env = cli_env()
    env["PYTHONPATH"] = f"{tmp_path}:{env.get('PYTHONPATH', '')}"  # the driver and the Ray workers import it
    proc = subprocess.run([sys.executable, "-m", "roll", "run", str(config)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    return out, proc


def test_env_raising_on_turn_3_stops_the_run(tmp_path):
    out, proc = run_user_env(tmp_path, PLUGIN, "Broken", "usertest/RaisesOnTurn3-v0", max_turns=5, save_steps=1)
    assert proc.returncode == 1, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("roll: ")]
    assert lines, proc.stderr[-3000:]
    msg = lines[0]  # the one-line message (the CLI may add where its own log is)
    assert "env tag 'Broken' (env id 'usertest/RaisesOnTurn3-v0') fails permanently" in msg
    assert "AttributeError: 'NoneType' object has no attribute 'strip'" in msg
    assert "at turn 3 twice" in msg and f"traceback in {out / 'env_errors.log'}" in msg
    log = (out / "env_errors.log").read_text()
    assert f'{tmp_path / "user_env_plugin.py"}", line 21, in step' in log
    assert '{"board": None}["board"].strip()' in log
    assert not (out / "checkpoints" / "step-1").exists() and not (out / "final_model").exists()


FLAT_REWARD_PLUGIN = PLUGIN + '''

class FlatReward(RaisesOnTurn3):
    """Every answer earns 0.5 and every episode ends after two turns: the bug is a reward that
    never looks at the answer."""

    def step(self, action):
        self.turn += 1
        return f"turn {self.turn}", 0.5, self.turn >= 2, False, {}


gymnasium.register(id="usertest/FlatReward-v0", entry_point=FlatReward, disable_env_checker=True)
'''


def test_reward_that_never_varies_is_named_at_the_end_of_the_run(tmp_path):
    out, proc = run_user_env(tmp_path, FLAT_REWARD_PLUGIN, "Flat", "usertest/FlatReward-v0", max_turns=3)
    # the run ends normally (a smoke run of a random model often sees no reward either) and says
    # once, on the console and in its log, that the policy got nothing to learn from
    assert proc.returncode == 0, proc.stderr[-3000:]
    warned = [line for line in proc.stderr.splitlines() if "no learning signal" in line]
    assert len(warned) == 1, proc.stderr[-3000:]
    assert "every advantage of steps 1-2 was zero" in warned[0] and "reward/<tag>/zero_std_groups" in warned[0]
    assert "no learning signal: every advantage of steps 1-2 was zero" in (out / "run.log").read_text()
    assert (out / "final_model" / "config.json").exists()
    steps = [json.loads(line) for line in (out / "logs" / "metrics.jsonl").read_text().splitlines()]
    adv = [(s["reward/advantages_min"], s["reward/advantages_max"]) for s in steps if "reward/advantages_max" in s]
    assert adv == [(0.0, 0.0), (0.0, 0.0)]
