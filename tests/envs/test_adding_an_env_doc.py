"""docs/adding_an_env.md stays true: its example env is written to disk, imported, registered,
checked by the strict checker, solved by the expert and played through the CLI."""
from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import gymnasium as gym
import pytest
from play_cli import play_cli

DOC = Path(__file__).resolve().parents[2] / "docs" / "adding_an_env.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), re.DOTALL)


@pytest.fixture(scope="module")
def user_package(tmp_path_factory):
    root = tmp_path_factory.mktemp("user_code")
    pkg = root / "my_envs"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "guess.py").write_text(python_blocks()[0])
    sys.path.insert(0, str(root))
    if "myproject/GuessNumber-v0" in gym.registry:
        del gym.registry["myproject/GuessNumber-v0"]
    importlib.import_module("my_envs.guess")
    yield root
    sys.path.remove(str(root))
    del gym.registry["myproject/GuessNumber-v0"]
    for name in ("my_envs.guess", "my_envs"):
        sys.modules.pop(name, None)


def test_the_doc_example_registers_passes_the_checker_and_is_solved(user_package, capsys):
    exec(compile(python_blocks()[1], "adding_an_env.md", "exec"), {})
    assert capsys.readouterr().out.strip() == "True"

    from roll.envs.agents import ExpertAgent, run_episode

    env = gym.make("myproject/GuessNumber-v0")
    assert all(run_episode(env, ExpertAgent(env), seed=s)["success"] for s in range(50))


def test_the_doc_example_plays_in_the_terminal(user_package):
    proc = play_cli("myproject/GuessNumber-v0", "--import", "my_envs.guess", "--seed", "3", typed="10\nplan\nquit\n",
                    cwd=str(user_package), pythonpath=str(user_package))
    assert proc.returncode == 0, proc.stderr
    assert "Guess my number" in proc.stdout and "expert plan: [" in proc.stdout
