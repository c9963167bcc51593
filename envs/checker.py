"""A stricter env checker for roll's text envs.

``check_text_env(env_id)`` runs ``gymnasium.utils.env_checker.check_env`` (with gymnasium's
warnings turned into failures) plus what the roll contract adds for text envs:

- observation and action spaces are ``gymnasium.spaces.Text``; observations are ``str`` inside
  the observation space, after reset and after every step;
- reset info has a non-empty ``instruction``; step info has bool ``success``,
  ``action_is_valid`` and ``action_is_effective``; rewards are finite numbers;
- determinism: two fresh envs, same seed, same actions -> identical observations, rewards,
  flags and infos (for several seeds);
- full episodes of three kinds, ``episodes`` of each: random answers, garbage actions (empty,
  huge, unicode, nested or unbalanced tags, non-strings) on every turn, and random answers
  mixed with garbage; every step's outputs are checked, none may raise, and malformed text is
  reported as invalid when the env requires the answer format;
- episodes end (terminate or truncate) within ``max_episode_turns`` turns of random play;
- ``expert_plan()``, where present, returns a list of strings.

The random agent draws from its own generator (``agent_seed``), never from the env's seed: an
agent whose generator were the env's would repeat the env's own draws (it "guesses" a
number-guessing env's secret on the first turn) and never reach the states where envs break
(agents also derive their stream from any seed they are given: envs/agents.py ``agent_rng``).

It raises ``EnvCheckError`` listing every failed check, and returns a report otherwise.
"""
from __future__ import annotations

import math
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.spaces import Text
from gymnasium.utils.env_checker import check_env, data_equivalence
from roll.envs.agents import RandomAgent

#: Text with no well-formed answer: it must never crash an env, and an env that requires the
#: answer format must report it as invalid.
MALFORMED_ACTIONS: tuple[Any, ...] = (
    "",
    " ",
    "\x00\x01\x02",
    "<answer>",
    "</answer>",
    "<answer></answer>",
    "<answer><answer>Up</answer></answer>",
    "<think><answer>unclosed think",
    "<think></think>",
    "😀" * 50,
    "<answer>" * 5000,
    "a" * 200_000,
    None,
    12345,
)
#: Well-formed but meaningless answers (odd unicode, bytes): they must only never crash.
ODD_ACTIONS: tuple[Any, ...] = (
    "<answer>" + "\u202e\ud800\uffff" + "</answer>",
    "<ANSWER>no such action for any env 🤖</ANSWER>",
    b"<answer>bytes</answer>",
    "<answer>" + "x" * 100_000 + "</answer>",
)


class EnvCheckError(AssertionError):
    """One or more checks failed; the message lists them."""


@dataclass
class CheckReport:
    env_id: str
    passed: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _make(env: str | Callable[[], gym.Env], env_kwargs: dict | None) -> gym.Env:
    if isinstance(env, str):
        return gym.make(env, **(env_kwargs or {}))
    return env()


def _check_info(info: Any, where: str, keys: tuple[str, ...]) -> list[str]:
    errs = []
    if not isinstance(info, dict):
        return [f"{where}: info is {type(info).__name__}, not dict"]
    for k in keys:
        if k not in info:
            errs.append(f"{where}: info lacks {k!r}")
        elif k != "instruction" and not isinstance(info[k], (bool, np.bool_)):
            errs.append(f"{where}: info[{k!r}] is {type(info[k]).__name__}, not bool")
    if "instruction" in keys and "instruction" in info:
        if not isinstance(info["instruction"], str) or not info["instruction"].strip():
            errs.append(f"{where}: info['instruction'] must be a non-empty string")
    return errs


def _check_step(env: gym.Env, result: Any, where: str) -> list[str]:
    if not isinstance(result, tuple) or len(result) != 5:
        return [f"{where}: step must return a 5-tuple"]
    obs, reward, terminated, truncated, info = result
    errs = []
    if not isinstance(obs, str):
        errs.append(f"{where}: observation is {type(obs).__name__}, not str")
    elif obs not in env.observation_space:
        bad = sorted({c for c in obs if c not in getattr(env.observation_space, "character_set", set(obs))})[:10]
        errs.append(f"{where}: observation not in observation_space (length {len(obs)}, characters outside: {bad})")
    if not isinstance(reward, (int, float, np.integer, np.floating)) or not math.isfinite(float(reward)):
        errs.append(f"{where}: reward {reward!r} is not a finite number")
    for name, flag in (("terminated", terminated), ("truncated", truncated)):
        if not isinstance(flag, (bool, np.bool_)):
            errs.append(f"{where}: {name} is {type(flag).__name__}, not bool")
    errs += _check_info(info, where, ("success", "action_is_valid", "action_is_effective"))
    return errs


def _raised(e: BaseException) -> str:
    """``Type: message (at file:line)``: where in the env the exception came from."""
    frames = traceback.extract_tb(e.__traceback__)
    where = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return f"raised {type(e).__name__}: {e}{where}"


def _short(action: Any) -> str:
    """The action for a message: long model text keeps its start and its end (the answer)."""
    if isinstance(action, (str, bytes)) and len(action) > 48:
        return f"{action[:12]!r}...{action[-28:]!r}"
    return repr(action)


def _rollout(env: gym.Env, seed: int, actions: list[Any]) -> list[Any]:
    out: list[Any] = [env.reset(seed=seed)]
    for a in actions:
        res = env.step(a)
        out.append(res)
        if res[2] or res[3]:
            break
    return out


def check_text_env(
    env: str | Callable[[], gym.Env],
    env_kwargs: dict | None = None,
    seeds: tuple[int, ...] = (0, 1, 2),
    determinism_turns: int = 20,
    max_episode_turns: int = 1000,
    run_gymnasium_checker: bool = True,
    episodes: int = 3,
    garbage_turns: int = 20,
    agent_seed: int = 20240917,
) -> CheckReport:
    """Check a registered env id (or a zero-argument env factory); raise EnvCheckError on failure.

    ``episodes`` full episodes of each kind of play (random, garbage, mixed) run on env seeds
    taken in turn from ``seeds``; garbage and mixed episodes stop after ``garbage_turns`` turns
    if the env has not ended them (an env need not end an episode of nonsense quickly)."""
    env_id = env if isinstance(env, str) else getattr(env, "__name__", repr(env))
    report = CheckReport(str(env_id))
    errors: list[str] = []
    agent_rng = np.random.default_rng(agent_seed)
    garbage_actions = MALFORMED_ACTIONS + ODD_ACTIONS

    def agent_for(e: gym.Env) -> RandomAgent:
        return RandomAgent(e, seed=int(agent_rng.integers(2**63)))

    def play(e: gym.Env, seed: int, pick: Callable[[int, Any, Any], tuple[Any, bool]], max_turns: int,
             label: str, must_end: bool) -> list[str]:
        """One full episode; ``pick(turn, obs, info) -> (action, is_malformed)``."""
        try:
            obs, info = e.reset(seed=seed)
        except Exception as exc:  # a crash is a failed check, reported with the others
            return [f"{label} seed {seed}: reset {_raised(exc)}"]
        if not isinstance(obs, str):
            return [f"{label} seed {seed}: reset observation is {type(obs).__name__}, not str"]
        strict = getattr(getattr(e.unwrapped, "parser_config", None), "require_answer_tag", False)
        for turn in range(max_turns):
            action, malformed = pick(turn, obs, info)
            where = f"{label} seed {seed} turn {turn} (action {_short(action)})"
            try:
                res = e.step(action)
            except Exception as exc:
                return [f"{where}: step {_raised(exc)}"]
            errs = _check_step(e, res, where)
            if malformed and strict and not errs and res[4].get("action_is_valid") is True:
                errs.append(f"{where}: a malformed action was accepted as valid")
            if errs:
                return errs
            obs, _, terminated, truncated, info = res
            if terminated or truncated:
                return []
        if must_end:
            return [f"{label} seed {seed}: episode did not end within {max_turns} random turns (no truncation?)"]
        return []

    def run(name: str, fn: Callable[[], list[str]]) -> None:
        try:
            errs = fn()
        except Exception as e:  # a crash is a failed check, reported with the others
            errs = [f"{name}: raised {type(e).__name__}: {e}"]
        if errs:
            errors.extend(errs)
        else:
            report.passed.append(name)

    def gymnasium_checker() -> list[str]:
        e = _make(env, env_kwargs)
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                check_env(e.unwrapped)
            errs = []
            for w in caught:
                msg = str(w.message)
                if "WARN:" not in msg:  # only gymnasium's own checker warnings count
                    continue
                if "not having a spec" in msg:  # an env built by a factory, not gymnasium.make
                    report.notes.append("render modes not checked: env has no spec")
                    continue
                errs.append(f"gymnasium check_env warned: {msg}")
            return errs
        finally:
            e.close()

    def spaces_and_reset() -> list[str]:
        e = _make(env, env_kwargs)
        errs = []
        for name in ("observation_space", "action_space"):
            if not isinstance(getattr(e, name), Text):
                errs.append(f"{name} is {type(getattr(e, name)).__name__}, not gymnasium.spaces.Text")
        for seed in seeds:
            obs, info = e.reset(seed=seed)
            if not isinstance(obs, str) or obs not in e.observation_space:
                errs.append(f"reset(seed={seed}): observation is not a str in observation_space")
            errs += _check_info(info, f"reset(seed={seed})", ("instruction",))
        e.close()
        return errs

    def episode_seeds() -> list[int]:
        return [seeds[i % len(seeds)] + (i // len(seeds)) * 1000 for i in range(episodes)]

    def random_play() -> list[str]:
        e = _make(env, env_kwargs)
        errs = []
        for seed in episode_seeds():
            agent = agent_for(e)
            errs += play(e, seed, lambda turn, obs, info, agent=agent: (agent.act(obs, info), False), max_episode_turns,
                         "random play", True)
        e.close()
        return errs

    def garbage_play() -> list[str]:
        e = _make(env, env_kwargs)
        errs = []
        for i, seed in enumerate(episode_seeds()):
            offset = i * 7  # each episode meets the garbage in another order and other states

            def pick(turn: int, obs: Any, info: Any, offset: int = offset) -> tuple[Any, bool]:
                k = (turn + offset) % len(garbage_actions)
                return garbage_actions[k], k < len(MALFORMED_ACTIONS)

            errs += play(e, seed, pick, garbage_turns, "garbage play", False)
        e.close()
        return errs

    def mixed_play() -> list[str]:
        e = _make(env, env_kwargs)
        errs = []
        for seed in episode_seeds():
            agent = agent_for(e)

            def pick(turn: int, obs: Any, info: Any, agent: RandomAgent = agent) -> tuple[Any, bool]:
                if agent_rng.random() < 0.5:
                    return agent.act(obs, info), False
                k = int(agent_rng.integers(len(garbage_actions)))
                return garbage_actions[k], k < len(MALFORMED_ACTIONS)

            errs += play(e, seed, pick, garbage_turns, "mixed play", False)
        e.close()
        return errs

    def determinism() -> list[str]:
        errs = []
        for seed in seeds:
            probe = _make(env, env_kwargs)
            agent = agent_for(probe)
            obs, info = probe.reset(seed=seed)
            actions: list[Any] = []
            for i in range(determinism_turns):
                # Mix random answers with an invalid one now and then: both paths must be deterministic.
                a = agent.act(obs, info) if i % 5 != 4 else "not an answer"
                actions.append(a)
                obs, _, term, trunc, info = probe.step(a)
                if term or trunc:
                    break
            probe.close()
            a_env, b_env = _make(env, env_kwargs), _make(env, env_kwargs)
            ra, rb = _rollout(a_env, seed, actions), _rollout(b_env, seed, actions)
            a_env.close()
            b_env.close()
            if len(ra) != len(rb) or not all(data_equivalence(x, y, exact=True) for x, y in zip(ra, rb)):
                first = next((i for i, (x, y) in enumerate(zip(ra, rb)) if not data_equivalence(x, y, exact=True)), len(ra))
                errs.append(f"seed {seed}: two envs diverged at call {first} with the same seed and actions")
        return errs

    def garbage() -> list[str]:
        e = _make(env, env_kwargs)
        errs = []
        strict = getattr(getattr(e.unwrapped, "parser_config", None), "require_answer_tag", False)
        for i, a in enumerate(MALFORMED_ACTIONS + ODD_ACTIONS):
            e.reset(seed=seeds[0])
            res = e.step(a)
            where = f"garbage action #{i} ({str(a)[:30]!r})"
            errs += _check_step(e, res, where)
            malformed = i < len(MALFORMED_ACTIONS)
            if malformed and strict and isinstance(res, tuple) and len(res) == 5 and res[4].get("action_is_valid") is True:
                errs.append(f"{where} was accepted as a valid action")
        e.close()
        return errs

    def expert() -> list[str]:
        e = _make(env, env_kwargs)
        fn = getattr(e.unwrapped, "expert_plan", None)
        if fn is None:
            report.notes.append("no expert_plan()")
            return []
        e.reset(seed=seeds[0])
        plan = fn()
        e.close()
        if not isinstance(plan, list) or not all(isinstance(p, str) for p in plan):
            return [f"expert_plan() must return list[str], got {plan!r:.80}"]
        return []

    if run_gymnasium_checker:
        run("gymnasium check_env", gymnasium_checker)
    run("text spaces and reset info", spaces_and_reset)
    run("random play: step outputs and termination", random_play)
    run("determinism per seed", determinism)
    run("garbage actions never raise", garbage)
    run("garbage play: full episodes of garbage", garbage_play)
    run("mixed play: random answers and garbage", mixed_play)
    run("expert_plan type", expert)
    if errors:
        raise EnvCheckError(f"{env_id} failed {len(errors)} check(s):\n  " + "\n  ".join(errors[:50]))
    return report
