"""roll/CodeSandbox-v0: the env contract, feedback, rewards, truncation and the expert."""
from __future__ import annotations

import time

import gymnasium as gym
import pytest
import roll.envs  # noqa: F401  (registers the roll/ ids)
from gymnasium.utils.env_checker import check_env
from roll.envs.agents import ExpertAgent, run_episode
from roll.envs.checker import check_text_env
from roll.envs.code.env import CodeSandboxEnv

ADD = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"


def make(**kw) -> CodeSandboxEnv:
    return CodeSandboxEnv(problem_ids=["sum-two"], **kw)


def test_gymnasium_check_env_and_roll_checker():
    env = gym.make("roll/CodeSandbox-v0")
    check_env(env.unwrapped)
    check_text_env("roll/CodeSandbox-v0")


def test_reset_info_and_seeded_problem_choice():
    env = gym.make("roll/CodeSandbox-v0")
    obs, info = env.reset(seed=3)
    assert "Python" in info["instruction"] and "```python" in info["instruction"]
    assert info["problem_id"] in obs or env.unwrapped.problem.title in obs
    again, _ = gym.make("roll/CodeSandbox-v0").reset(seed=3)
    assert again == obs
    ids = {gym.make("roll/CodeSandbox-v0").reset(seed=s)[1]["problem_id"] for s in range(20)}
    assert len(ids) > 5
    _, info = env.reset(options={"problem_id": "gcd"})
    assert info["problem_id"] == "gcd"
    with pytest.raises(ValueError, match="unknown problem_id"):
        env.reset(options={"problem_id": "nope"})


def test_expert_solves_every_difficulty_in_one_turn():
    for difficulty in ("easy", "medium", "hard"):
        env = CodeSandboxEnv(difficulty=difficulty, full_pass_bonus=0.5, sandbox={"timeout_s": 30, "cpu_time_s": 20})
        result = run_episode(env, ExpertAgent(env), seed=1)
        assert result["success"] and result["steps"] == 1 and result["terminated"]
        assert result["return"] == pytest.approx(1.5)
        assert env.expert_plan() == []


def test_feedback_rewards_and_truncation():
    env = make(max_turns=3, turn_cost=0.05, format_penalty=-0.2)
    env.reset(seed=0)
    obs, r, term, trunc, info = env.step("the answer is 3")
    assert not info["action_is_valid"] and r == pytest.approx(-0.25) and not (term or trunc)
    assert "not accepted" in obs and "Attempts left: 2" in obs
    obs, r, term, trunc, info = env.step("```python\nprint(3)\n```")  # right on the first test only
    assert info["action_is_valid"] and info["action_is_effective"]
    assert info["passed"] == 1 and info["total"] == 4 and r == pytest.approx(0.25 - 0.05)
    assert "Passed 1/4" in obs and "Test 2 failed (wrong answer)" in obs and "-5 5" in obs
    obs, r, term, trunc, info = env.step("```python\nprint(3)\n```")  # same code again
    assert not info["action_is_effective"] and r == pytest.approx(-0.05)
    assert trunc and not term and not info["success"]
    obs, r, term, trunc, info = env.step(ADD)  # the episode is over
    assert not info["action_is_valid"] and r == 0.0


def test_feedback_shows_input_and_verdict_but_not_the_expected_output():
    """Over its turns a model shown expected outputs collects the hidden answers."""
    wrong = "```python\nprint(3)\n```"
    env = make(max_turns=3)
    env.reset(seed=0)
    obs, *_ = env.step(wrong)
    assert "Test 2 failed (wrong answer)" in obs and "Input:\n-5 5" in obs and "Your output:\n3" in obs
    assert "Expected" not in obs and "\n0\n" not in obs, obs
    env = make(max_turns=3, show_expected=True)  # an explicit option
    env.reset(seed=0)
    obs, *_ = env.step(wrong)
    assert "Expected output:\n0" in obs


def test_rewards_sum_to_best_pass_rate_plus_bonus():
    env = make(max_turns=4, full_pass_bonus=1.0)
    env.reset(seed=0)
    total = 0.0
    for text in ("```python\nprint(3)\n```", "```python\nprint(0)\n```", ADD):
        _, r, term, _, info = env.step(text)
        total += r
    assert term and info["success"] and total == pytest.approx(2.0)


def test_runtime_error_feedback_is_truncated():
    env = make(feedback_chars=300)
    env.reset(seed=0)
    obs, *_ = env.step("```python\nraise RuntimeError('x' * 5000)\n```")
    assert "runtime error" in obs and "RuntimeError" in obs and len(obs) < 400


def test_steps_are_fast():
    env = make()
    env.reset(seed=0)
    start = time.monotonic()
    env.step("no code here")
    env.step("```python\ndef broken(:\n```")  # syntax errors are found without running
    assert time.monotonic() - start < 0.1
    start = time.monotonic()
    env.step(ADD)
    assert time.monotonic() - start < 1.5  # four sandboxed runs, two at a time


def test_bad_arguments():
    with pytest.raises(ValueError):
        CodeSandboxEnv(max_turns=0)
    with pytest.raises(ValueError):
        CodeSandboxEnv(difficulty="impossible")
    with pytest.raises(ValueError):
        CodeSandboxEnv(render_mode="human")
    env = make(render_mode="ansi")
    obs, _ = env.reset(seed=0)
    assert env.render() == obs
