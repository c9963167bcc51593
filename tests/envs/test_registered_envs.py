"""Every env registered under the `roll/` namespace passes the strict text-env checker.

The ids are read from gymnasium's registry at collection time, so an env registered later
(by anyone, in any envs/<name>/registration.py) is checked without touching this file.
"""
from __future__ import annotations

import gymnasium as gym
import pytest
import roll.envs  # noqa: F401  (registers every shipped env)
from roll.envs.checker import check_text_env

ROLL_IDS = sorted(env_id for env_id, spec in gym.registry.items() if spec.namespace == "roll")


def test_the_shipped_grid_envs_are_registered():
    for env_id in ["roll/Sokoban-v0", "roll/Sokoban8x8-v0", "roll/SokobanXSB-v0", "roll/FrozenLake-v0", "roll/FrozenLakeSlippery-v0"]:
        assert env_id in ROLL_IDS


@pytest.mark.parametrize("env_id", ROLL_IDS)
def test_registered_env_passes_the_checker(env_id):
    report = check_text_env(env_id)
    assert "gymnasium check_env" in report.passed
    assert "determinism per seed" in report.passed
