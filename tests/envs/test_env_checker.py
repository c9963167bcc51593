"""The checker itself: it must catch envs that break the text-env contract."""
from __future__ import annotations

import gymnasium as gym
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
