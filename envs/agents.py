"""Built-in agents that talk to any roll env the way a model does: with text.

Every agent has ``act(observation, info) -> str`` and answers in the model format
(``<think>...</think><answer>...</answer>``), so its text goes through the env's own parser.
Used by tests, benchmarks, the SFT data generator and for smoke-testing users' envs.

Where an agent needs a random action it asks the env, in order: ``valid_actions()`` (a method
returning the answers that make sense in the current state, for envs without a fixed
vocabulary), then the ``action_words`` attribute, then ``action_space.sample()``. The expert
needs ``expert_plan() -> list[str]`` (remaining optimal answers from the current state).
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.spaces import Text


def format_answer(actions: list[str], think: str | None = None) -> str:
    """Model-style text for one turn."""
    prefix = f"<think>{think}</think>" if think else ""
    return f"{prefix}<answer>{', '.join(actions)}</answer>"


def action_choices(env: gym.Env) -> list[str] | None:
    """The answers an agent may pick at random in the current state, or None if the env has none."""
    u = env.unwrapped
    valid = getattr(u, "valid_actions", None)
    if callable(valid):
        choices = list(valid())
        if choices:
            return choices
    words = getattr(u, "action_words", None)
    if isinstance(words, Mapping):
        words = list(dict.fromkeys(words.values()))
    if words:
        return [str(w) for w in words]
    return None


def agent_rng(seed: int | None) -> np.random.Generator:
    """An agent's random stream for ``seed``, independent of an env reset with the same seed.

    ``np.random.default_rng(seed)`` is the very generator gymnasium's ``reset(seed=seed)`` builds,
    so an agent seeded like its episode would draw the bits the env drew its layout or problem
    from: its choices (a noisy expert's random moves, the tool expert's head answers) would be a
    learnable function of the observation instead of noise (on roll/Arith-v0 at epsilon 0.5 the
    head answers correlated -0.86 with the second operand)."""
    return np.random.default_rng(None if seed is None else [int(seed), 0xA6E7])


def _actions_per_turn(env: gym.Env) -> int:
    config = getattr(env.unwrapped, "parser_config", None)
    return max(1, int(getattr(config, "max_actions_per_turn", 1)))


class RandomAgent:
    """Uniformly random actions (one per turn), in the model's answer format."""

    def __init__(self, env: gym.Env, seed: int | None = None, think: bool = True):
        self.env = env
        self.rng = agent_rng(seed)
        self.think = think

    def random_action(self) -> str:
        choices = action_choices(self.env)
        if choices:
            return choices[int(self.rng.integers(len(choices)))]
        space = self.env.action_space
        space.seed(int(self.rng.integers(2**31)))
        if isinstance(space, Text):
            # Text spaces of model output allow 100k characters; a short random string is
            # just as random an answer and keeps smoke tests fast.
            hi = min(space.max_length, 32)
            lo = min(max(space.min_length, 1), hi)
            return space.sample(mask=(int(self.rng.integers(lo, hi + 1)), None))
        return str(space.sample())

    def act(self, observation: str, info: dict[str, Any]) -> str:
        return format_answer([self.random_action()], "I pick an action at random." if self.think else None)


class ExpertAgent:
    """Follows ``env.unwrapped.expert_plan()``, several actions per turn where the env allows.

    When the plan is empty (the env is solved, or stuck with no solution) it falls back to a
    random action so an episode always advances; ``last_source`` says which was used.
    """

    def __init__(
        self,
        env: gym.Env,
        actions_per_turn: int | None = None,
        think: bool = True,
        seed: int | None = None,
    ):
        if not callable(getattr(env.unwrapped, "expert_plan", None)):
            raise TypeError(f"{type(env.unwrapped).__name__} has no expert_plan(); the expert agent needs one")
        self.env = env
        self.actions_per_turn = actions_per_turn or _actions_per_turn(env)
        self.think = think
        self.random = RandomAgent(env, seed=seed, think=think)
        self.last_source = "expert"

    def expert_text(self) -> str:
        plan = self.env.unwrapped.expert_plan()
        if not plan:
            self.last_source = "random"
            return format_answer([self.random.random_action()], "I see no plan; I try something." if self.think else None)
        self.last_source = "expert"
        take = plan[: self.actions_per_turn]
        think = None
        if self.think:
            shown = ", ".join(plan[:8]) + (", ..." if len(plan) > 8 else "")
            think = f"Planning ahead: {shown} ({len(plan)} steps left). Next: {', '.join(take)}."
        return format_answer(take, think)

    def act(self, observation: str, info: dict[str, Any]) -> str:
        return self.expert_text()


class NoisyExpertAgent:
    """The expert, but with probability ``epsilon`` a uniformly random action instead.

    The SFT data generator uses it to show recovery from mistakes.
    """

    def __init__(
        self,
        env: gym.Env,
        epsilon: float = 0.1,
        seed: int | None = None,
        actions_per_turn: int | None = None,
        think: bool = True,
    ):
        if not 0.0 <= epsilon <= 1.0:
            raise ValueError(f"epsilon must be in [0, 1], got {epsilon}")
        self.epsilon = epsilon
        self.rng = agent_rng(seed)
        self.expert = ExpertAgent(env, actions_per_turn=actions_per_turn, think=think, seed=seed)
        self.last_source = "expert"

    def act(self, observation: str, info: dict[str, Any]) -> str:
        if self.rng.random() < self.epsilon:
            self.last_source = "random"
            return self.expert.random.act(observation, info)
        text = self.expert.act(observation, info)
        self.last_source = self.expert.last_source
        return text


def tool_call_text(name: str, arguments: Mapping[str, Any]) -> str:
    """A tool call in the Hermes / Qwen2.5 format, as the tiny model's chat template writes it."""
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': dict(arguments)})}\n</tool_call>"


def digit_typo(text: str, rng: np.random.Generator) -> str:
    """``text`` with one of its digits replaced by a different digit (unchanged if it has none)."""
    places = [i for i, ch in enumerate(text) if ch.isdigit()]
    if not places:
        return text
    i = places[int(rng.integers(len(places)))]
    other = [d for d in "0123456789" if d != text[i]]
    return text[:i] + other[int(rng.integers(len(other)))] + text[i + 1:]


class ToolExpertAgent:
    """Computes the answer with a tool, then answers with the tool's result.

    For envs wrapped with tools (roll/Tools-v0) whose env has ``expert_tool_call()`` (the call
    that computes the answer, ``{"name", "arguments"}``, e.g. roll/Arith-v0's calculator call)
    and ``expert_plan()``. The results of a tool turn reach the agent as
    ``info["tool_results"]`` (the ``tool`` messages' contents; pipelines/sft_data.py passes
    them); a turn without them starts the computation. ``epsilon`` is the share of problems the
    agent answers from its head instead, as a model that has not learnt when to use the tool
    does: no call, and the answer off by one digit. The choice is one per problem, so the
    demonstrations show no cue for it: a model trained on them calls the tool on about
    ``1 - epsilon`` of the problems when sampling, and RL has to learn to always call it. A
    tool result that is an error is answered with the expert's own answer.
    """

    def __init__(self, env: gym.Env, epsilon: float = 0.0, seed: int | None = None, think: bool = False):
        u = env.unwrapped
        if not (callable(getattr(u, "expert_tool_call", None)) and callable(getattr(u, "expert_plan", None))):
            raise TypeError(f"{type(u).__name__} has no expert_tool_call() and expert_plan(); the tool expert needs both")
        if not 0.0 <= epsilon <= 1.0:
            raise ValueError(f"epsilon must be in [0, 1], got {epsilon}")
        self.env = env
        self.epsilon = epsilon
        self.rng = agent_rng(seed)
        self.think = think
        self.last_source = "expert"

    def _answer(self, value: str, think: str) -> str:
        return format_answer([value], think if self.think else None)

    def act(self, observation: str, info: dict[str, Any]) -> str:
        u = self.env.unwrapped
        results = info.get("tool_results")
        if results:
            self.last_source = "expert"
            value = str(results[-1]).strip()
            if value.startswith("Error"):
                plan = u.expert_plan()
                value = plan[0] if plan else value
            return self._answer(value, "The tool computed it.")
        call = u.expert_tool_call()
        plan = u.expert_plan()
        if call is None:
            self.last_source = "expert"
            return self._answer(plan[0] if plan else "", "Nothing to compute.")
        if self.rng.random() < self.epsilon:
            self.last_source = "noise"
            return self._answer(digit_typo(plan[0], self.rng) if plan else "", "I compute it in my head.")
        self.last_source = "expert"
        think = f"<think>I use the {call['name']} tool.</think>" if self.think else ""
        return think + tool_call_text(call["name"], call["arguments"])


def demo_agent(env: gym.Env, epsilon: float, seed: int | None = None, think: bool = False) -> Any:
    """The agent that writes demonstrations for ``env``: the tool expert for a tool-wrapped env
    whose env computes with a tool (``expert_tool_call``), the noisy expert otherwise."""
    has_tools = True
    try:
        env.get_wrapper_attr("tool_turn")
    except AttributeError:
        has_tools = False
    if has_tools and callable(getattr(env.unwrapped, "expert_tool_call", None)):
        return ToolExpertAgent(env, epsilon=epsilon, seed=seed, think=think)
    return NoisyExpertAgent(env, epsilon=epsilon, seed=seed, think=think)


def run_episode(env: gym.Env, agent: Any, seed: int | None = None, max_turns: int = 10_000) -> dict[str, Any]:
    """Play one episode; ``steps`` counts turns (env.step calls).

    ``max_turns`` guards against envs that never end; hitting it sets ``stopped_by_runner``.
    """
    obs, info = env.reset(seed=seed)
    first_info = info
    transcript: list[dict[str, Any]] = []
    total = 0.0
    terminated = truncated = False
    while not (terminated or truncated) and len(transcript) < max_turns:
        text = agent.act(obs, info)
        next_obs, reward, terminated, truncated, info = env.step(text)
        transcript.append(
            {
                "observation": obs,
                "action": text,
                "reward": float(reward),
                "terminated": bool(terminated),
                "truncated": bool(truncated),
                "info": info,
                "source": getattr(agent, "last_source", None),
            }
        )
        total += float(reward)
        obs = next_obs
    return {
        "seed": seed,
        "success": bool(info.get("success", False)),
        "return": total,
        "steps": len(transcript),
        "terminated": bool(terminated),
        "truncated": bool(truncated),
        "stopped_by_runner": not (terminated or truncated),
        "instruction": first_info.get("instruction", ""),
        "final_observation": obs,
        "transcript": transcript,
    }
