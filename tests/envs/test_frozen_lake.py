"""FrozenLake: random reachable maps, gymnasium dynamics, text symbols, experts."""
from __future__ import annotations

import gymnasium as gym
import pytest
import roll.envs  # noqa: F401
from roll.envs.frozen_lake.env import (
    FrozenLakeEnv,
    MapGenerationError,
    _shortest_path_lengths,
    generate_map,
)

MAP = ["SFFF", "FHFH", "FFFH", "HFFG"]


def answer(*actions: str) -> str:
    return f"<answer>{', '.join(actions)}</answer>"


def test_random_maps_are_reachable_with_random_start_and_goal():
    starts, goals = set(), set()
    for seed in range(200):
        desc = generate_map(seed, size=4)
        flat = "".join(desc)
        assert flat.count("S") == 1 and flat.count("G") == 1
        assert _shortest_path_lengths(desc, flat.index("G"))[flat.index("S")] >= 1
        starts.add(flat.index("S"))
        goals.add(flat.index("G"))
    assert len(starts) > 10 and len(goals) > 10  # not always the corners
    assert generate_map(7) == generate_map(7)
    desc = generate_map(3, size=6, min_path_length=6)
    flat = "".join(desc)
    assert _shortest_path_lengths(desc, flat.index("G"))[flat.index("S")] >= 6


def test_symbols_moves_hole_and_goal():
    env = FrozenLakeEnv(max_steps=20)
    obs, info = env.reset(seed=0, options={"map": MAP})
    assert obs == "P___\n_O_O\n___O\nO__G"
    assert "Left, Down, Right, Up" in info["instruction"]
    obs, r, term, trunc, info = env.step(answer("left"))  # the edge: no move
    assert not info["action_is_effective"] and info["action_is_valid"] and r == 0.0
    env.step(answer("Right"))
    obs, r, term, trunc, info = env.step(answer("Down"))  # into the hole
    assert obs.splitlines()[1] == "_X_O" and term and not trunc and not info["success"] and r == 0.0
    env.reset(seed=0, options={"map": MAP})
    for a in ["Down", "Down", "Right", "Right", "Down"]:
        obs, r, term, trunc, info = env.step(answer(a))
    obs, r, term, trunc, info = env.step(answer("Right"))
    assert obs.splitlines()[3] == "O__√" and r == 1.0 and term and info["success"]


def test_expert_shortest_path_and_multi_actions():
    env = FrozenLakeEnv(max_actions_per_turn=6)
    env.reset(seed=0, options={"map": MAP})
    plan = env.expert_plan()
    assert len(plan) == 6
    obs, r, term, trunc, info = env.step(answer(*plan))
    assert term and info["success"] and info["actions"] == plan


def test_slippery_is_seed_deterministic_and_sometimes_slides():
    def run(seed):
        env = gym.make("roll/FrozenLakeSlippery-v0")
        out = [env.reset(seed=seed)[0]]
        for _ in range(15):
            obs, r, term, trunc, info = env.step(answer("Right"))
            out.append(obs)
            if term or trunc:
                break
        return out

    assert run(3) == run(3)
    env = FrozenLakeEnv(is_slippery=True, max_steps=1000)
    env.reset(seed=0, options={"map": ["SFFF", "FFFF", "FFFF", "FFFG"]})
    moved = {env.step(answer("Right"))[0] for _ in range(30)}
    assert len(moved) > 2  # the intended move is not the only outcome


def test_slippery_expert_beats_random():
    from roll.envs.agents import ExpertAgent, RandomAgent, run_episode

    env = gym.make("roll/FrozenLakeSlippery-v0")
    expert = sum(run_episode(env, ExpertAgent(env, seed=0), seed)["success"] for seed in range(60))
    rand = sum(run_episode(env, RandomAgent(env, seed=0), seed)["success"] for seed in range(60))
    assert expert > rand and expert >= 45


def test_bad_arguments():
    with pytest.raises(ValueError, match="p_frozen"):
        FrozenLakeEnv(p_frozen=0.0)
    with pytest.raises(ValueError, match="min_path_length"):
        FrozenLakeEnv(size=3, min_path_length=9)
    with pytest.raises(MapGenerationError):
        generate_map(0, size=8, p_frozen=0.05, min_path_length=14, max_tries=3)
    with pytest.raises(ValueError, match="one S"):
        FrozenLakeEnv().reset(options={"map": ["FF", "FG"]})
