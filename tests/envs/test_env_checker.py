"""The checker itself: it must catch envs that break the text-env contract."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.spaces import Discrete, Text
from roll.envs.base import UnicodeText
from roll.envs.checker import EnvCheckError, check_text_env
from roll.envs.parsing import extract_answer


class GoodEnv(gym.Env):
    """Minimal correct text env: say 'go' three times."""

    metadata = {"render_modes": []}
    action_words = ("go",)  # what the checker's random agent picks from

    def __init__(self):
        self.observation_space = Text(64, min_length=0)
        self.action_space = UnicodeText()
        self.count = 0

    def reset(self, *, seed: int | None = None, options=None):
        super().reset(seed=seed)
        self.count = int(self.np_random.integers(0, 2))
        return f"count{self.count}", {"instruction": "Answer <answer>go</answer>."}

    def step(self, action):
        parsed = extract_answer(action)
        valid = parsed.valid and parsed.answer.lower() == "go"
        self.count += valid
        done = self.count >= 3
        info = {"success": done, "action_is_valid": valid, "action_is_effective": valid}
        return f"count{self.count}", (1.0 if valid else -0.1), done, False, info


def test_a_correct_env_passes():
    report = check_text_env(GoodEnv)
    assert "determinism per seed" in report.passed and "garbage actions never raise" in report.passed


class NoInstruction(GoodEnv):
    def reset(self, *, seed=None, options=None):
        obs, _ = super().reset(seed=seed)
        return obs, {}


class ObsOutsideSpace(GoodEnv):
    def step(self, action):
        obs, *rest = super().step(action)
        return obs + " √", *rest


class Nondeterministic(GoodEnv):
    calls = 0

    def step(self, action):
        Nondeterministic.calls += 1
        obs, r, term, trunc, info = super().step(action)
        return obs, r + Nondeterministic.calls, term, trunc, info


class CrashesOnGarbage(GoodEnv):
    def step(self, action):
        if not isinstance(action, str) or "<answer>" not in action:
            raise ValueError("bad action")
        return super().step(action)


class NeverEnds(GoodEnv):
    def step(self, action):
        obs, r, term, trunc, info = super().step(action)
        return obs, r, False, False, info


class MissingStepKeys(GoodEnv):
    def step(self, action):
        obs, r, term, trunc, info = super().step(action)
        del info["action_is_effective"]
        return obs, r, term, trunc, info


class DiscreteObs(GoodEnv):
    def __init__(self):
        super().__init__()
        self.observation_space = Discrete(3)


@pytest.mark.parametrize(
    "cls, message",
    [
        (NoInstruction, "instruction"),
        (ObsOutsideSpace, "not in observation_space"),
        (Nondeterministic, "diverged"),
        (CrashesOnGarbage, "raised ValueError"),
        (NeverEnds, "did not end"),
        (MissingStepKeys, "action_is_effective"),
        (DiscreteObs, "not gymnasium.spaces.Text"),
    ],
)
def test_contract_violations_are_caught(cls, message):
    with pytest.raises(EnvCheckError, match=message):
        check_text_env(cls, max_episode_turns=50)


class GuessNumber(gym.Env):
    """A number-guessing env with a bug past the first turn: a wrong guess returns its hint as
    an int, not text. An agent that shares the env's seed guesses the secret on turn 1 (both
    draw the same first number) and never sees the bug."""

    metadata = {"render_modes": []}
    action_words = tuple(str(i) for i in range(10))

    def __init__(self):
        self.observation_space = UnicodeText(64)
        self.action_space = UnicodeText()
        self.secret = 0
        self.turn = 0

    def reset(self, *, seed: int | None = None, options=None):
        super().reset(seed=seed)
        self.secret = int(self.np_random.integers(0, 10))
        self.turn = 0
        return "guess a digit", {"instruction": "Answer <answer>d</answer> with a digit 0-9."}

    def step(self, action):
        self.turn += 1
        parsed = extract_answer(action)
        valid = parsed.valid and parsed.answer.strip() in self.action_words
        solved = valid and int(parsed.answer) == self.secret
        info = {"success": solved, "action_is_valid": valid, "action_is_effective": valid}
        if not valid:
            return "say a digit", -0.1, False, self.turn >= 6, info
        obs = "solved" if solved else self.secret - int(parsed.answer)  # the bug: an int hint
        return obs, float(solved), solved, self.turn >= 6, info


class BreaksOnLaterGarbage(GoodEnv):
    """Handles garbage on the first turn only: later, a non-text action crashes it."""

    def reset(self, *, seed=None, options=None):
        self.turn = 0
        return super().reset(seed=seed)

    def step(self, action):
        self.turn += 1
        if self.turn > 1:
            action = action.strip()  # AttributeError for None, int and bytes actions past turn 1
        return super().step(action)


def test_the_random_agent_does_not_share_the_env_seed():
    """An agent seeded like the env does not repeat the env's first draw (agents derive their own
    stream, envs/agents.py ``agent_rng``; with ``default_rng(seed)`` it guessed 10 of 10), nor does
    one on the checker's own generator."""
    from roll.envs.agents import RandomAgent

    env = GuessNumber()
    hits_shared = hits_own = 0
    rng = np.random.default_rng(20240917)
    for seed in range(10):
        env.reset(seed=seed)
        hits_shared += RandomAgent(env, seed=seed).random_action() == str(env.secret)
        hits_own += RandomAgent(env, seed=int(rng.integers(2**63))).random_action() == str(env.secret)
    assert hits_shared <= 4 and hits_own <= 4


def test_a_bug_past_the_first_turn_of_a_number_guessing_env_fails_the_checker():
    with pytest.raises(EnvCheckError, match=r"random play seed \d+ turn \d+ .*observation is int, not str"):
        check_text_env(GuessNumber)


def test_garbage_past_the_first_turn_is_checked():
    with pytest.raises(EnvCheckError) as err:
        check_text_env(BreaksOnLaterGarbage, max_episode_turns=50)
    text = str(err.value)
    assert "garbage play seed" in text and "step raised AttributeError" in text
    assert "test_env_checker.py:" in text  # the env's file and line
    assert "garbage actions never raise" not in text  # the first-step sweep alone passed it


def test_every_step_of_every_episode_is_type_checked():
    """An observation that turns into a non-string only late in an episode is caught."""

    class LateIntObs(GoodEnv):
        def step(self, action):
            obs, *rest = super().step(action)
            return (7 if self.count >= 2 else obs), *rest

    with pytest.raises(EnvCheckError, match="observation is int, not str"):
        check_text_env(LateIntObs, max_episode_turns=50)
