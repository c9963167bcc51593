"""Terminal play: scripted input through play() and through the `roll envs play` CLI."""
from __future__ import annotations

import io

from play_cli import play_cli
from roll.envs.play import play


def run(lines: str, env_id: str = "roll/Sokoban-v0", **kw) -> tuple[int, str]:
    out = io.StringIO()
    rc = play(env_id, stdin=io.StringIO(lines), stdout=out, **kw)
    return rc, out.getvalue()


def test_play_shows_instruction_observation_reward_and_info():
    rc, text = run("up\nplan\n<answer>Down</answer>\nhelp\nquit\nup\n", seed=3)
    assert rc == 0
    assert "== roll/Sokoban-v0  seed 3 ==" in text and "Push every box" in text
    assert "reward -0.1" in text and "action_is_valid=True" in text
    assert "expert plan: [" in text
    assert text.count("reward ") == 2  # nothing after quit is played


def test_end_of_input_exits_cleanly_and_episodes_roll_over():
    rc, text = run("", env_id="roll/FrozenLake-v0")
    assert rc == 0 and "action>" in text
    # Solve with the expert plan typed in one line (several actions allowed via kwargs).
    from roll.envs.frozen_lake.env import FrozenLakeEnv

    env = FrozenLakeEnv(max_actions_per_turn=20)
    env.reset(seed=0)
    plan = ", ".join(env.expert_plan())
    rc, text = run(f"{plan}\nreset\nnot an action\n", env_id="roll/FrozenLake-v0", seed=0, env_kwargs={"max_actions_per_turn": 20})
    assert "solved" in text and "seed 1" in text and "seed 2" in text
    assert 'parse_error="unknown action' in text


def test_unknown_env_id():
    rc, text = run("", env_id="roll/NoSuchEnv-v0")
    assert rc == 2 and "cannot make" in text


def test_cli_dispatches_to_play():
    proc = play_cli("roll/Sokoban-v0", "--seed", "3", "--kwargs", "max_steps=5", typed="right\nquit\n", cwd="/")
    assert proc.returncode == 0, proc.stderr
    assert "seed 3" in proc.stdout and "You have 5 moves" in proc.stdout
